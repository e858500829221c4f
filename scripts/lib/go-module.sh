# shellcheck shell=bash
# Building a Go program inside its own extracted module archive (the module
# is the main module: upstream's go.mod and go.sum, nothing re-resolved, no
# version list asked of the proxy). Sourced by scripts/build-capi.sh and
# scripts/build-helm.sh, which set `me` (the prefix of their error lines)
# and Go's caches (GOMODCACHE, GOCACHE) first.

# fail WHAT LOG: one line naming the module@version go names, then exit 1.
fail() {
	local at line
	at=$(grep -oE '[A-Za-z0-9._~/-]+@v[0-9][^ :]*' "$2" | head -1 || true)
	line=$(grep -m1 -E '403|404|410|not available|invalid version|unrecognized|dial|timeout|cannot|error' "$2" | sed -E 's#https?://[^ ]+##g; s/^[[:space:]]+//' || true)
	echo "$me: $1 failed${at:+ at $at}: ${line:-see $2} (log: $2)" >&2
	exit 1
}

# module_dir MODULE@VERSION: where the module cache holds its archive
# (downloaded first if it is not there).
module_dir() {
	(cd /tmp && go mod download -json "$1") | sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p'
}
