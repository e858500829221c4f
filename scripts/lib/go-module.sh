# shellcheck shell=bash
# Building a Go program inside its own extracted module archive (the module
# is the main module: upstream's go.mod and go.sum, nothing re-resolved, no
# version list asked of the proxy). Sourced by scripts/build-capi.sh,
# scripts/build-helm.sh and scripts/build-prometheus.sh, which set `me` (the
# prefix of their error lines) first.

# pinned MODULE VERSION...: each pair must be a line of controlplane/PINS
# (the one list of what is built); exit 2 naming the first that is not.
pinned() {
	while (($# >= 2)); do
		grep -qE "^${1}[[:space:]]+${2}[[:space:]]" controlplane/PINS || {
			echo "$me: controlplane/PINS does not list $1 $2" >&2
			exit 2
		}
		shift 2
	done
}

# go_env DIR WHAT: Go's caches under $SR_TEST_CACHE (shared with the control
# plane), this build's logs in $SR_TEST_CACHE/DIR/logs; sets `cache`, `logs`
# and `go_version`. WHAT names what needs Go when it is not on PATH.
go_env() {
	cache=${SR_TEST_CACHE:-/var/cache/sandbox-readiness-tests}
	export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off
	unset GOFLAGS
	logs=$cache/$1/logs
	mkdir -p "$GOMODCACHE" "$GOCACHE" "$logs" || {
		echo "$me: cannot create the cache under $cache" >&2
		exit 1
	}
	command -v go >/dev/null || {
		echo "$me: go is not on PATH ($2)" >&2
		exit 2
	}
	go_version=$(go version)
}

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
