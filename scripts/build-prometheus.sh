#!/usr/bin/env bash
# Builds Prometheus (github.com/prometheus/prometheus's cmd/prometheus) at the
# version controlplane/PINS pins, with Kubernetes service discovery (Debian's
# Prometheus in the test cache is built without it: `kubernetes_sd_configs`
# is "not found in type config.ScrapeConfig"), inside its own extracted module
# archive (upstream's go.mod and go.sum, as scripts/build-helm.sh builds
# Helm), into a cache outside the checkout:
#
#   $SR_TEST_CACHE/prometheus/<key>/bin/prometheus
#
# Only the service discoveries upstream's build tags keep (remove_all_sd:
# static, file, http) plus kubernetes (enable_kubernetes_sd): the cloud SDKs
# are not built. No web UI assets (builtinassets off): the API serves.
# <key> hashes the pin, the build flags and `go version`: a warm run builds
# nothing. tests/integration/metrics.rs runs it: the monitoring page's
# kubernetes_sd job against the real kube-apiserver.
#
# Usage: scripts/build-prometheus.sh [build|path]
#   build  download, then build what is missing (the default)
#   path   print the bin dir of a finished build; exit 1 with one line if it
#          is not built
# A failure is one line on stderr naming the module and version (the full
# output stays under $SR_TEST_CACHE/prometheus/logs/), and nothing is cached.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests; Go's
# caches in $SR_TEST_CACHE/go/{mod,build}, shared with the control plane),
# SR_GO_BUILD_TIMEOUT (s, default 2400). Needs go >= 1.26.7 on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
me=build-prometheus
mode=${1:-build}

prom_mod=github.com/prometheus/prometheus
prom_ver=v0.316.0
# pinned, go_env, fail, module_dir
# shellcheck source=scripts/lib/go-module.sh
. scripts/lib/go-module.sh
pinned "$prom_mod" "$prom_ver"
prom_tags=remove_all_sd,enable_kubernetes_sd
prom_ldflags="-s -w -X github.com/prometheus/common/version.Version=3.16.0"

go_env prometheus "Go >= 1.26.7 builds Prometheus $prom_ver"
key=$(printf '%s\n' "$prom_mod@$prom_ver" "$prom_tags" "$prom_ldflags" "$go_version" | sha256sum | cut -c1-12)
out=$cache/prometheus/$key

case $mode in
path)
	[[ -x $out/bin/prometheus ]] || {
		echo "$me: not built yet: run scripts/build-prometheus.sh (wanted $out)" >&2
		exit 1
	}
	echo "$out/bin"
	exit 0
	;;
build) ;;
*)
	echo "usage: scripts/build-prometheus.sh [build|path]" >&2
	exit 2
	;;
esac

if [[ -x $out/bin/prometheus ]]; then
	echo "$me: Prometheus $prom_ver cached, nothing to build ($out)" >&2
	exit 0
fi
exec 9>"$cache/prometheus/.build.lock"
flock 9
[[ -x $out/bin/prometheus ]] && exit 0
rm -rf "$cache/prometheus/.tmp."*
tmp=$(mktemp -d "$cache/prometheus/.tmp.$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
log=$logs/build.log
dir=$(module_dir "$prom_mod@$prom_ver" 2>"$log") || fail "go mod download $prom_mod@$prom_ver" "$log"
[[ -f $dir/go.mod && -d $dir/cmd/prometheus ]] || fail "no cmd/prometheus in $prom_mod@$prom_ver ($dir)" "$log"
(cd "$dir" && GOFLAGS=-mod=readonly timeout --kill-after=10 "${SR_GO_BUILD_TIMEOUT:-2400}" \
	go build -trimpath -tags "$prom_tags" -ldflags="$prom_ldflags" -o "$tmp/bin/prometheus" ./cmd/prometheus) >"$log" 2>&1 ||
	fail "go build of $prom_mod@$prom_ver" "$log"
"$tmp/bin/prometheus" --version >/dev/null 2>&1 || fail "the built prometheus does not run" "$log"
printf 'key %s\n%s\n%s@%s tags %s\nbuilt %s in %ss\n' "$key" "$go_version" "$prom_mod" "$prom_ver" "$prom_tags" "$(date -u +%FT%TZ)" "$((SECONDS - t0))" >"$tmp/stamp"
mv -T "$tmp" "$out"
trap - EXIT
find "$cache/prometheus" -mindepth 1 -maxdepth 1 -type d -name '????????????' ! -name "$key" -exec rm -rf {} +
echo "$me: Prometheus $prom_ver built in $((SECONDS - t0))s ($out)" >&2
