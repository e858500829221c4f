#!/usr/bin/env bash
# Builds the real Cluster API manager and the real Talos bootstrap provider
# (CABPT) at the versions controlplane/PINS pins, each from its own Go module
# with upstream's exact module graph, into a cache outside the checkout, and
# stages the CRD and webhook manifests from the same module archives beside
# them. Both have their main at the module root and no `replace`; each is
# built with `go build .` inside its extracted module (the module is then the
# main module: its own go.mod and go.sum, nothing re-resolved) rather than
# `go install module@version`, which also asks the proxy for the module's
# version list to look for a deprecation notice — and the proxy refuses
# CABPT's list (403) while it serves v0.6.11 itself.
#
#   $SR_TEST_CACHE/capi/<key>/bin/{capi-manager,cabpt-manager}
#   $SR_TEST_CACHE/capi/<key>/config/{capi,cabpt}/   upstream's config/ trees
#   $SR_TEST_CACHE/capi/<key>/config/prometheus-operator/
#       the prometheus-operator CRDs from its module archive (not built): the
#       docs' ServiceMonitor and PrometheusRule are dry-run against them
#
# <key> hashes the pins, the build flags and `go version`: a warm run builds
# nothing. `scripts/control-plane.sh capi` runs what this builds.
#
# Usage: scripts/build-capi.sh [download|build|path]
#   download  `go mod download` of both modules' graphs (network bound)
#   build     download, then build what is missing (the default)
#   path      print the cache dir of a finished build; exit 1 with one line if
#             it is not built
# Failures are one line on stderr naming the module and version where go
# names one; the full output stays under $SR_TEST_CACHE/capi/logs/.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests; Go's
# caches in $SR_TEST_CACHE/go/{mod,build}, shared with the control plane),
# SR_GO_DOWNLOAD_TIMEOUT (s, default 900), SR_GO_BUILD_TIMEOUT (s per module,
# default 2400). Needs go >= 1.26 on PATH (GOTOOLCHAIN=local).
set -euo pipefail
cd "$(dirname "$0")/.."
me=build-capi
mode=${1:-build}

# module@version, the binary's name, and the package holding its version
# variables (Cluster API's manager logs it and refuses nothing for it; CABPT
# has no version package).
capi_mod=sigs.k8s.io/cluster-api
capi_ver=v1.13.6
cabpt_mod=github.com/siderolabs/cluster-api-bootstrap-provider-talos
cabpt_ver=v0.6.11
prom_mod=github.com/prometheus-operator/prometheus-operator
prom_ver=v0.85.0
# pinned, go_env, fail, module_dir
# shellcheck source=scripts/lib/go-module.sh
. scripts/lib/go-module.sh
pinned "$capi_mod" "$capi_ver" "$cabpt_mod" "$cabpt_ver" "$prom_mod" "$prom_ver"
capi_ldflags="-s -w -X $capi_mod/version.gitVersion=$capi_ver -X $capi_mod/version.gitMajor=1 -X $capi_mod/version.gitMinor=13 -X $capi_mod/version.gitTreeState=clean"
cabpt_ldflags="-s -w"

go_env capi "Go >= 1.26 builds Cluster API $capi_ver"
key=$(printf '%s\n' "$capi_mod@$capi_ver" "$capi_ldflags" "$cabpt_mod@$cabpt_ver" "$cabpt_ldflags" "$prom_mod@$prom_ver" "$go_version" | sha256sum | cut -c1-12)
out=$cache/capi/$key

complete() {
	[[ -x $out/bin/capi-manager && -x $out/bin/cabpt-manager && -f $out/config/capi/crd/kustomization.yaml &&
		-f $out/config/cabpt/crd/kustomization.yaml && -f $out/config/prometheus-operator/monitoring.coreos.com_servicemonitors.yaml ]]
}

download() {
	local m log
	for m in "$capi_mod@$capi_ver" "$cabpt_mod@$cabpt_ver" "$prom_mod@$prom_ver"; do
		log=$logs/download-${m##*/}.log
		# `go mod download M@V` fetches the module; its graph comes with the
		# build (go install resolves it from the module's own go.mod and go.sum).
		(cd /tmp && timeout --kill-after=10 "${SR_GO_DOWNLOAD_TIMEOUT:-900}" go mod download "$m") >"$log" 2>&1 || fail "go mod download $m" "$log"
	done
}

case $mode in
path)
	complete || {
		echo "$me: not built yet: run scripts/build-capi.sh (wanted $out)" >&2
		exit 1
	}
	echo "$out"
	exit 0
	;;
download)
	download
	exit 0
	;;
build) ;;
*)
	echo "usage: scripts/build-capi.sh [download|build|path]" >&2
	exit 2
	;;
esac

if complete; then
	echo "$me: Cluster API $capi_ver and CABPT $cabpt_ver cached, nothing to build ($out)" >&2
	exit 0
fi
exec 9>"$cache/capi/.build.lock"
flock 9
if complete; then
	echo "$me: Cluster API $capi_ver and CABPT $cabpt_ver cached, nothing to build ($out)" >&2
	exit 0
fi
free=$(df -Pm "$cache" | awk 'NR == 2 { print $4 }')
((free >= 3000)) || {
	echo "$me: not enough disk under $cache: $free MiB free, the two builds need about 3000 MiB" >&2
	exit 1
}
download
rm -rf "$cache/capi/.tmp."*
tmp=$(mktemp -d "$cache/capi/.tmp.$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/config"
t0=$SECONDS
build_one() { # MODULE VERSION LDFLAGS NAME
	local log=$logs/build-$4.log start=$SECONDS dir
	dir=$(module_dir "$1@$2")
	[[ -f $dir/go.mod && -f $dir/main.go ]] || fail "no main package at the root of $1@$2 ($dir)" /dev/null
	(cd "$dir" && GOFLAGS=-mod=readonly timeout --kill-after=10 "${SR_GO_BUILD_TIMEOUT:-2400}" \
		go build -trimpath -ldflags="$3" -o "$tmp/bin/$4" .) >"$log" 2>&1 || fail "go build of $1@$2" "$log"
	# The CRD and webhook manifests of exactly this release.
	[[ -d $dir/config ]] || fail "no config/ in $1@$2" "$log"
	cp -r "$dir/config" "$tmp/config/${4%-manager}"
	chmod -R u+w "$tmp/config/${4%-manager}"
	echo "$me: $4 ($1@$2) built in $((SECONDS - start))s" >&2
}
build_one "$capi_mod" "$capi_ver" "$capi_ldflags" capi-manager
build_one "$cabpt_mod" "$cabpt_ver" "$cabpt_ldflags" cabpt-manager
prom=$(module_dir "$prom_mod@$prom_ver")
mkdir "$tmp/config/prometheus-operator"
cp "$prom"/example/prometheus-operator-crd/*.yaml "$tmp/config/prometheus-operator/" ||
	fail "no CRDs in $prom_mod@$prom_ver (example/prometheus-operator-crd)" /dev/null
chmod -R u+w "$tmp/config/prometheus-operator"
printf 'key %s\n%s\n%s@%s\n%s@%s\nbuilt %s in %ss\n' "$key" "$go_version" "$capi_mod" "$capi_ver" "$cabpt_mod" "$cabpt_ver" "$(date -u +%FT%TZ)" "$((SECONDS - t0))" >"$tmp/stamp"
rm -rf "$out"
mv -T "$tmp" "$out"
trap - EXIT
find "$cache/capi" -mindepth 1 -maxdepth 1 -type d -name '????????????' ! -name "$key" -exec rm -rf {} +
echo "$me: build took $((SECONDS - t0))s ($out)" >&2
