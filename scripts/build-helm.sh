#!/usr/bin/env bash
# Builds Helm v4 (helm.sh/helm/v4's cmd/helm) at the version controlplane/PINS
# pins, inside its own extracted module archive (upstream's go.mod and go.sum,
# as scripts/build-capi.sh builds Cluster API), into a cache outside the
# checkout:
#
#   $SR_TEST_CACHE/helm/<key>/bin/helm
#
# <key> hashes the pin, the build flags and `go version`: a warm run builds
# nothing. The chart's tests (charts/, scripts/render-deploy.sh) run it.
#
# Usage: scripts/build-helm.sh [build|path]
#   build  download, then build what is missing (the default)
#   path   print the bin dir of a finished build; exit 1 with one line if it
#          is not built
# A failure is one line on stderr naming the module and version (the full
# output stays under $SR_TEST_CACHE/helm/logs/), and nothing is cached.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests; Go's
# caches in $SR_TEST_CACHE/go/{mod,build}, shared with the control plane),
# SR_GO_BUILD_TIMEOUT (s, default 2400). Needs go >= 1.26 on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
me=build-helm
mode=${1:-build}

helm_mod=helm.sh/helm/v4
helm_ver=v4.3.2
# pinned, go_env, fail, module_dir
# shellcheck source=scripts/lib/go-module.sh
. scripts/lib/go-module.sh
pinned "$helm_mod" "$helm_ver"
# `helm version` prints what these set (upstream's Makefile sets the same).
helm_ldflags="-s -w -X $helm_mod/internal/version.version=$helm_ver -X $helm_mod/internal/version.gitTreeState=clean"

go_env helm "Go >= 1.26 builds Helm $helm_ver"
key=$(printf '%s\n' "$helm_mod@$helm_ver" "$helm_ldflags" "$go_version" | sha256sum | cut -c1-12)
out=$cache/helm/$key

case $mode in
path)
	[[ -x $out/bin/helm ]] || {
		echo "$me: not built yet: run scripts/build-helm.sh (wanted $out)" >&2
		exit 1
	}
	echo "$out/bin"
	exit 0
	;;
build) ;;
*)
	echo "usage: scripts/build-helm.sh [build|path]" >&2
	exit 2
	;;
esac

if [[ -x $out/bin/helm ]]; then
	echo "$me: Helm $helm_ver cached, nothing to build ($out)" >&2
	exit 0
fi
exec 9>"$cache/helm/.build.lock"
flock 9
[[ -x $out/bin/helm ]] && exit 0
rm -rf "$cache/helm/.tmp."*
tmp=$(mktemp -d "$cache/helm/.tmp.$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
log=$logs/build.log
dir=$(module_dir "$helm_mod@$helm_ver" 2>"$log") || fail "go mod download $helm_mod@$helm_ver" "$log"
[[ -f $dir/go.mod && -d $dir/cmd/helm ]] || fail "no cmd/helm in $helm_mod@$helm_ver ($dir)" "$log"
(cd "$dir" && GOFLAGS=-mod=readonly timeout --kill-after=10 "${SR_GO_BUILD_TIMEOUT:-2400}" \
	go build -trimpath -ldflags="$helm_ldflags" -o "$tmp/bin/helm" ./cmd/helm) >"$log" 2>&1 || fail "go build of $helm_mod@$helm_ver" "$log"
"$tmp/bin/helm" version >/dev/null 2>&1 || fail "the built helm does not run" "$log"
printf 'key %s\n%s\n%s@%s\nbuilt %s in %ss\n' "$key" "$go_version" "$helm_mod" "$helm_ver" "$(date -u +%FT%TZ)" "$((SECONDS - t0))" >"$tmp/stamp"
mv -T "$tmp" "$out"
trap - EXIT
find "$cache/helm" -mindepth 1 -maxdepth 1 -type d -name '????????????' ! -name "$key" -exec rm -rf {} +
echo "$me: Helm $helm_ver built in $((SECONDS - t0))s ($out)" >&2
