#!/usr/bin/env bash
# Builds the Talos oracle (talos-oracle/, see its README.md) once per
# pkg/machinery version, into a cache outside the checkout:
#   cabpt  go.cabpt.mod: the machinery Cluster API Bootstrap Provider Talos
#          v0.6.11 pins (v1.12.0; every shared module at CABPT's version)
#   node   go.mod: the Talos release the node runs (v1.13.9, the newest
#          v1.13.x the Go module proxy serves)
#   imager imager/go.mod, a module of its own: Talos's main module at the
#          node's release (v1.13.9), for its imager profile package
#          (pkg/imager/profile), which machinery does not hold. Its own
#          cache key, so a change to it leaves the two machinery builds'
#          key (and their binaries) as they were.
#
#   scripts/build-talos-oracle.sh [build]   download, then build what is missing;
#                                           prints the env lines below
#   scripts/build-talos-oracle.sh download  only `go mod download` (all three module graphs)
#   scripts/build-talos-oracle.sh path      prints the env lines of a finished build,
#                                           exit 1 if the machinery builds are not built
#                                           (the imager line only when it is built)
#
# The env lines (for `eval "$(scripts/build-talos-oracle.sh path)"`):
#   SR_TALOS_ORACLE_CABPT=<cache>/talos-oracle/<key>/talos-oracle-cabpt
#   SR_TALOS_ORACLE_NODE=<cache>/talos-oracle/<key>/talos-oracle-node
#   SR_TALOS_ORACLE_IMAGER=<cache>/talos-oracle/imager-<key>/talos-oracle-imager
# <key> hashes the go.mod/go.sum files, the Go sources and `go version`, so a
# warm run builds nothing, and a changed source builds a new directory (moved
# into place with one rename; a half-finished build is never seen).
# The imager build failing (a module the proxy refuses, say) is reported on
# stderr but does not fail the script: the machinery builds stand, `path`
# prints their lines without the imager's, the one test that needs it fails
# saying it is missing, and scripts/test.sh's Go build chain (the control
# plane is built after this script) goes on.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests; Go's
# module and build caches go to $SR_TEST_CACHE/go/{mod,build}),
# SR_GO_DOWNLOAD_TIMEOUT (seconds per `go mod download`, default 600),
# GOPROXY (default https://proxy.golang.org). Needs go >= 1.26.6 on PATH
# (GOTOOLCHAIN=local: nothing else is downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD/talos-oracle
mode=${1:-build}

cache=${SR_TEST_CACHE:-/var/cache/sandbox-readiness-tests}
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
timeout_s=${SR_GO_DOWNLOAD_TIMEOUT:-600}

command -v go >/dev/null || {
	echo "build-talos-oracle: go is not on PATH (Go >= 1.26.6 builds machinery v1.13.9)" >&2
	exit 2
}

# name:modfile pairs; the node build uses go.mod itself.
builds=(cabpt:go.cabpt.mod node:go.mod)

key=$({
	go version
	cd "$src" && sha256sum go.mod go.sum go.cabpt.mod go.cabpt.sum ./*.go
} | sha256sum | cut -c1-16)
dir=$cache/talos-oracle/$key
imager_key=$({
	go version
	cd "$src/imager" && sha256sum go.mod go.sum ./*.go
} | sha256sum | cut -c1-16)
# "imager-" keeps it out of the 16-character names the machinery builds'
# cleanup below removes.
imager_dir=$cache/talos-oracle/imager-$imager_key
imager_bin=$imager_dir/talos-oracle-imager

print_paths() {
	echo "SR_TALOS_ORACLE_CABPT=$dir/talos-oracle-cabpt"
	echo "SR_TALOS_ORACLE_NODE=$dir/talos-oracle-node"
	if [ -x "$imager_bin" ]; then
		echo "SR_TALOS_ORACLE_IMAGER=$imager_bin"
	fi
}

# download [name:dir:modfile …] (default: the two machinery builds)
download() {
	local b name rest mdir modfile log rc
	[ $# -gt 0 ] || set -- "${builds[@]/:/:.:}"
	for b in "$@"; do
		name=${b%%:*} rest=${b#*:}
		mdir=${rest%%:*} modfile=${rest#*:}
		log=$(mktemp)
		rc=0
		(cd "$src/$mdir" && timeout "$timeout_s" go mod download -modfile="$modfile") >"$log" 2>&1 || rc=$?
		if [ $rc -ne 0 ]; then
			if [ $rc -eq 124 ]; then
				echo "build-talos-oracle: go mod download ($name, $modfile) did not finish in ${timeout_s}s" >&2
			else
				# One line naming the module and version the proxy refused.
				local refused
				refused=$(grep -oE '[A-Za-z0-9._~/-]+@v[0-9][^ :]*' "$log" | head -1 || true)
				echo "build-talos-oracle: go mod download ($name, $modfile) failed${refused:+ at $refused}: $(grep -m1 -E '403|404|410|not available|invalid version|unrecognized|dial|timeout' "$log" | sed 's/^[[:space:]]*//' || head -1 "$log")" >&2
			fi
			rm -f "$log"
			return 1
		fi
		rm -f "$log"
	done
}

case $mode in
path)
	if [ -x "$dir/talos-oracle-cabpt" ] && [ -x "$dir/talos-oracle-node" ]; then
		print_paths
		exit 0
	fi
	echo "build-talos-oracle: not built for this source ($dir); run scripts/build-talos-oracle.sh" >&2
	exit 1
	;;
download)
	download
	download imager:imager:go.mod
	exit 0
	;;
build) ;;
*)
	echo "usage: scripts/build-talos-oracle.sh [download|build|path]" >&2
	exit 2
	;;
esac

# The imager build: Talos's main module, its own key (see the top). Returns
# non-zero when it cannot be built; the machinery builds stand either way.
build_imager() {
	if [ -x "$imager_bin" ]; then
		echo "build-talos-oracle: imager cached in $imager_dir" >&2
		return 0
	fi
	download imager:imager:go.mod || return 1
	local itmp start ver
	mkdir -p "$cache/talos-oracle"
	itmp=$(mktemp -d "$cache/talos-oracle/.imager-$imager_key.XXXXXX")
	chmod 755 "$itmp"
	start=$(date +%s)
	if ! (cd "$src/imager" && go build -trimpath -ldflags='-s -w' -o "$itmp/talos-oracle-imager" .); then
		rm -rf "$itmp"
		echo "build-talos-oracle: the imager build (talos-oracle/imager, github.com/siderolabs/talos) failed" >&2
		return 1
	fi
	# The binary must name the Talos module it was built with.
	ver=$(echo '{"op":"version"}' | "$itmp/talos-oracle-imager")
	echo "build-talos-oracle: imager built in $(($(date +%s) - start))s: $ver" >&2
	mv -T "$itmp" "$imager_dir" 2>/dev/null || rm -rf "$itmp"
	# Builds of older imager sources are not used again.
	find "$cache/talos-oracle" -mindepth 1 -maxdepth 1 -type d -name 'imager-????????????????' ! -name "imager-$imager_key" -exec rm -rf {} +
}

if [ -x "$dir/talos-oracle-cabpt" ] && [ -x "$dir/talos-oracle-node" ]; then
	echo "build-talos-oracle: cached in $dir" >&2
	build_imager || echo "build-talos-oracle: the imager oracle is not built (above); SR_TALOS_ORACLE_IMAGER stays unset" >&2
	print_paths
	exit 0
fi

download || exit 1
mkdir -p "$cache/talos-oracle"
tmp=$(mktemp -d "$cache/talos-oracle/.$key.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
for b in "${builds[@]}"; do
	name=${b%%:*} modfile=${b#*:}
	start=$(date +%s)
	(cd "$src" && go build -modfile="$modfile" -trimpath -ldflags='-s -w' -o "$tmp/talos-oracle-$name" .)
	# The binary must name the machinery it was built with.
	ver=$(echo '{"op":"version"}' | "$tmp/talos-oracle-$name")
	echo "build-talos-oracle: $name built in $(($(date +%s) - start))s: $ver" >&2
done
# Another run may have finished the same key meanwhile: keep the first.
mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
trap - EXIT
# Builds of older sources are not used again.
find "$cache/talos-oracle" -mindepth 1 -maxdepth 1 -type d -name '????????????????' ! -name "$key" -exec rm -rf {} +
echo "build-talos-oracle: built into $dir ($(du -sh "$dir" | cut -f1))" >&2
build_imager || echo "build-talos-oracle: the imager oracle is not built (above); SR_TALOS_ORACLE_IMAGER stays unset" >&2
print_paths
