#!/usr/bin/env bash
# Builds the runtime stack of the project's real test node (scripts/kubelet-node.sh)
# at the versions controlplane/PINS pins, each following Talos 1.13.9, into a
# cache outside the checkout:
#
#   $SR_TEST_CACHE/noderuntime/<key>/bin/
#     kubelet                      k8s.io/kubernetes/cmd/kubelet, from noderuntime/go.mod
#                                  (the control plane's module graph: shares its GOCACHE)
#     containerd, containerd-shim-runc-v2, ctr
#                                  github.com/containerd/containerd/v2
#     runc                         github.com/opencontainers/runc (cgo, -tags seccomp,
#                                  Debian's libseccomp-dev)
#     runsc, containerd-shim-runsc-v1
#                                  gvisor.dev/gvisor (runsc, shim)
#     bridge, host-local, loopback github.com/containernetworking/plugins
#
# Every module but the kubelet's is built inside its extracted module archive
# (`go build ./cmd/...` with upstream's own go.mod and go.sum, as
# scripts/build-capi.sh does): nothing re-resolved, and no version list asked
# of the proxy. CGO_ENABLED=0 for all but runc.
#
# <key> is a short hash of the pins and flags here, noderuntime/go.mod and
# go.sum, `go version` and the libseccomp-dev version runc links: a change to
# any of them builds anew, anything else finds the cached binaries.
#
# Usage: scripts/build-node-runtime.sh [download|build|all|path]
#   download  `go mod download` of every module (network bound)
#   build     the compile (downloads what is missing itself)
#   all       download then build (the default)
#   path      print the bin dir and exit 0 if it is complete; else one line on
#             stderr and exit 1. The way to get the bin dir: the other phases
#             print only progress lines.
# A warm `build`/`all` builds nothing and prints one line. A cold build prints
# each binary's time and the total. A failure is one line on stderr naming the
# module and version (the full go output is kept under
# $SR_TEST_CACHE/noderuntime/logs/), exit non-zero, and nothing is cached: the
# build goes to a temporary dir renamed into place only when complete.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests; Go's
# caches in $SR_TEST_CACHE/go/{mod,build}, shared with the control plane), GO
# (default `go` on PATH, else /usr/local/go/bin/go), SR_GO_DOWNLOAD_TIMEOUT
# (s, default 900), SR_GO_BUILD_TIMEOUT (s per module, default 3000).
# Needs for runc: gcc, pkg-config, libseccomp-dev (scripts/install-test-deps.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
mod_dir=$here/noderuntime
cache=${SR_TEST_CACHE:-/var/cache/sandbox-readiness-tests}
phase=${1:-all}
me=build-node-runtime

die() {
	printf '%s: %s\n' "$me" "$*" >&2
	exit 1
}

case $phase in
download | build | all | path) ;;
*)
	printf 'usage: %s [download|build|all|path]\n' "$0" >&2
	exit 2
	;;
esac

# The pins (controlplane/PINS says why each). Revisions are the release tags'
# commits as siderolabs/pkgs records them (their binaries print them).
k8s_mod=k8s.io/kubernetes k8s_ver=v1.36.3
containerd_mod=github.com/containerd/containerd/v2 containerd_ver=v2.2.7
containerd_rev=7835c8dfefceee63b1a4f9e84e015ddc8434fdc3
runc_mod=github.com/opencontainers/runc runc_ver=v1.4.3
runc_rev=bb14dabeb7185bb72c8c86735d090dcb20f36587
gvisor_mod=gvisor.dev/gvisor gvisor_ver=v0.0.0-20260905035102-160fafc42237
cni_mod=github.com/containernetworking/plugins cni_ver=v1.9.1
for pin in "$k8s_mod $k8s_ver" "$containerd_mod $containerd_ver" "$runc_mod $runc_ver" "$gvisor_mod $gvisor_ver" "$cni_mod $cni_ver"; do
	grep -qE "^${pin%% *}[[:space:]]+${pin##* }[[:space:]]" "$here/controlplane/PINS" ||
		die "controlplane/PINS does not list $pin"
done

# kubelet's version variables as build-control-plane.sh sets them.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X $pkg.gitVersion=$k8s_ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=36"
	k8s_ldflags+=" -X $pkg.gitCommit=0000000000000000000000000000000000000000 -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-07-22T18:07:38Z"
done
containerd_ldflags="-s -w -X $containerd_mod/version.Version=$containerd_ver -X $containerd_mod/version.Revision=$containerd_rev -X $containerd_mod/version.Package=github.com/containerd/containerd/v2"
containerd_tags=urfave_cli_no_docs,no_btrfs
runc_ldflags="-s -w -X main.version=${runc_ver#v} -X main.gitCommit=$runc_rev"
runc_tags=seccomp,urfave_cli_no_docs
# No release tag of gVisor is served: the version says which snapshot this is.
gvisor_ldflags="-s -w -X gvisor.dev/gvisor/runsc/version.version=$gvisor_ver"
cni_ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_ver"
bins=(kubelet containerd containerd-shim-runc-v2 ctr runc runsc containerd-shim-runsc-v1 bridge host-local loopback)
build_flags="trimpath k8s:$k8s_ldflags containerd:$containerd_tags:$containerd_ldflags runc:cgo:$runc_tags:$runc_ldflags gvisor:$gvisor_ldflags cni:$cni_ldflags"

# Disk: the module archives of these graphs (about 700 MiB beside the control
# plane's) and the compile (GOCACHE grows about 2 GiB, binaries 300 MiB).
need_build_mib=3000

if [[ -n ${GO:-} ]]; then
	go=$GO
elif command -v go >/dev/null 2>&1; then
	go=$(command -v go)
elif [[ -x /usr/local/go/bin/go ]]; then
	go=/usr/local/go/bin/go
else
	die "no go command (set GO, or install Go >= 1.26 at /usr/local/go)"
fi

export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off
export GOFLAGS="-mod=readonly -buildvcs=false"
logs=$cache/noderuntime/logs
mkdir -p "$GOMODCACHE" "$GOCACHE" "$logs" || die "cannot create the cache under $cache"

go_version=$("$go" version 2>/dev/null) || die "$go does not run"
case $go_version in
go\ version\ go1.2[6-9]* | go\ version\ go1.[3-9][0-9]*) ;;
*) die "needs Go >= 1.26 (GOTOOLCHAIN=local), found: $go_version" ;;
esac
seccomp_version=$(dpkg-query -W -f='${Version}' libseccomp-dev 2>/dev/null) || seccomp_version=

key=$({
	cat "$mod_dir/go.mod" "$mod_dir/go.sum"
	printf '%s\n' "$k8s_mod@$k8s_ver" "$containerd_mod@$containerd_ver" "$runc_mod@$runc_ver" "$gvisor_mod@$gvisor_ver" "$cni_mod@$cni_ver"
	printf '%s\n%s\nlibseccomp-dev %s\n' "$build_flags" "$go_version" "$seccomp_version"
} | sha256sum | cut -c1-12)
out=$cache/noderuntime/$key
bin=$out/bin

complete() {
	[[ -f $out/stamp ]] || return 1
	local b
	for b in "${bins[@]}"; do
		[[ -x $bin/$b ]] || return 1
	done
}

if [[ $phase == path ]]; then
	complete || die "not built yet: run scripts/build-node-runtime.sh all (wanted $bin)"
	printf '%s\n' "$bin"
	exit 0
fi

# noderuntime/go.mod must keep every requirement and replacement of
# controlplane/go.mod: else kubelet would be built from other versions than
# the control plane (and compile them all anew).
missing=$(grep -hE '^[[:space:]]+[a-z0-9.]+/[^ ]+ (=> [^ ]+ )?v[0-9][^ ]*' "$here/controlplane/go.mod" | sed -E 's# // indirect$##' |
	while IFS= read -r line; do grep -qxF -- "$line" <(sed -E 's# // indirect$##' "$mod_dir/go.mod") || printf '%s\n' "$line"; done | head -n1)
[[ -z $missing ]] || die "noderuntime/go.mod lacks controlplane/go.mod's line '$(printf '%s' "$missing" | tr -s '[:space:]' ' ')' (keep the two graphs equal)"

# first_error LOG: the one line of go's output that names what failed.
first_error() {
	local line
	line=$(grep -m1 -E '(@v[0-9]|: (reading|verifying|missing go.sum|unrecognized import|no matching|invalid version))' "$1" ||
		grep -m1 -vE '^(go: downloading|go: finding|#)' "$1" || true)
	line=${line#go: }
	line=$(printf '%s' "$line" | sed -E 's#reading https?://[^ ]+: ##; s#[[:space:]]+# #g')
	printf '%s' "${line:-see $1}"
}

# module_dir MODULE@VERSION: the extracted archive in the module cache
# (downloads it); dies naming the module on a refusal.
module_dir() {
	local log=$logs/download-${1//\//_}.log dir rc=0
	(cd / && timeout --foreground --kill-after=10 "${SR_GO_DOWNLOAD_TIMEOUT:-900}" "$go" mod download -json "$1") >"$log" 2>&1 || rc=$?
	((rc != 124 && rc != 137)) || die "go mod download $1 timed out after ${SR_GO_DOWNLOAD_TIMEOUT:-900}s (log: $log)"
	if ((rc != 0)) || grep -q '"Error"' "$log"; then
		local err
		err=$(sed -nE 's/^[[:space:]]*"Error": "(.*)",?$/\1/p' "$log" | head -n1 | sed -E 's#reading https?://[^ ]+: ##; s#\\n\\t# #g')
		die "go mod download $1 failed: ${err:-$(first_error "$log")} (log: $log)"
	fi
	dir=$(sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p' "$log")
	[[ -n $dir && -f $dir/go.mod ]] || die "no module archive for $1 (log: $log)"
	printf '%s' "$dir"
}

# graph_download DIR NAME: `go mod download` of the module graph in DIR.
graph_download() {
	local log=$logs/download-graph-$2.log rc=0
	(cd "$1" && timeout --foreground --kill-after=10 "${SR_GO_DOWNLOAD_TIMEOUT:-900}" "$go" mod download -x) >"$log" 2>&1 || rc=$?
	((rc != 124 && rc != 137)) || die "go mod download in $2 timed out after ${SR_GO_DOWNLOAD_TIMEOUT:-900}s (log: $log)"
	((rc == 0)) || die "go mod download for $2 failed: $(first_error "$log") (log: $log)"
}

do_download() {
	local t0=$SECONDS m dir
	graph_download "$mod_dir" kubelet
	for m in "$containerd_mod@$containerd_ver" "$runc_mod@$runc_ver" "$gvisor_mod@$gvisor_ver" "$cni_mod@$cni_ver"; do
		dir=$(module_dir "$m")
		graph_download "$dir" "${m//\//_}"
	done
	# A line only when something came from the network (go -x logs its gets).
	if grep -qs '^# get ' "$logs"/download-graph-*.log; then
		printf '%s: modules downloaded in %ss\n' "$me" "$((SECONDS - t0))"
	fi
}

# build_in WHAT@VER DIR LOGNAME CGO TAGS LDFLAGS OUT PKG...: one `go build`
# of PKG... in DIR to OUT (a file for one package, a dir for several).
build_in() {
	local what=$1 dir=$2 log=$logs/build-$3.log cgo=$4 tags=$5 ldflags=$6 o=$7 start=$SECONDS rc=0
	shift 7
	(cd "$dir" && CGO_ENABLED=$cgo timeout --foreground --kill-after=10 "${SR_GO_BUILD_TIMEOUT:-3000}" \
		"$go" build -trimpath ${tags:+-tags "$tags"} -ldflags="$ldflags" -o "$o" "$@") >"$log" 2>&1 || rc=$?
	if ((rc != 0)); then
		((rc == 124 || rc == 137)) && die "go build of $what timed out after ${SR_GO_BUILD_TIMEOUT:-3000}s (log: $log)"
		local pkg
		pkg=$(grep -m1 '^# ' "$log" | cut -c3- || true)
		die "go build of $what failed${pkg:+ in $pkg}: $(grep -m1 -vE '^(#|go: downloading)' "$log" | sed -E 's#[[:space:]]+# #g') (log: $log)"
	fi
	printf '%s: %s built in %ss\n' "$me" "$what" "$((SECONDS - start))"
}

do_build() {
	if complete; then
		printf '%s: node runtime cached, nothing to build (%s)\n' "$me" "$bin"
		return 0
	fi
	exec 9>"$cache/noderuntime/.build.lock"
	flock 9
	if complete; then
		printf '%s: node runtime cached, nothing to build (%s)\n' "$me" "$bin"
		return 0
	fi
	local free
	free=$(df -Pm "$cache" | awk 'NR == 2 { print $4 }')
	((free >= need_build_mib)) || die "not enough disk under $cache: $free MiB free, the build needs about $need_build_mib MiB"
	[[ -n $seccomp_version ]] && command -v gcc >/dev/null && command -v pkg-config >/dev/null ||
		die "runc needs gcc, pkg-config and libseccomp-dev (scripts/install-test-deps.sh installs them)"
	rm -rf "$cache/noderuntime/.tmp."* "$out"
	tmp=
	local t0=$SECONDS
	tmp=$(mktemp -d "$cache/noderuntime/.tmp.$key.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	mkdir "$tmp/bin"
	# Every module first: a refused one stops the build before any compile.
	local runc_dir cni_dir containerd_dir gvisor_dir
	runc_dir=$(module_dir "$runc_mod@$runc_ver")
	cni_dir=$(module_dir "$cni_mod@$cni_ver")
	containerd_dir=$(module_dir "$containerd_mod@$containerd_ver")
	gvisor_dir=$(module_dir "$gvisor_mod@$gvisor_ver")
	build_in "$runc_mod@$runc_ver" "$runc_dir" runc 1 "$runc_tags" "$runc_ldflags" "$tmp/bin/runc" .
	build_in "$cni_mod@$cni_ver" "$cni_dir" cni 0 "" "$cni_ldflags" "$tmp/bin/" ./plugins/main/bridge ./plugins/ipam/host-local ./plugins/main/loopback
	build_in "$containerd_mod@$containerd_ver" "$containerd_dir" containerd 0 "$containerd_tags" "$containerd_ldflags" "$tmp/bin/" ./cmd/containerd ./cmd/ctr
	build_in "$containerd_mod@$containerd_ver (shim)" "$containerd_dir" containerd-shim 0 "$containerd_tags,no_grpc" "$containerd_ldflags" "$tmp/bin/containerd-shim-runc-v2" ./cmd/containerd-shim-runc-v2
	build_in "$gvisor_mod@$gvisor_ver (runsc)" "$gvisor_dir" runsc 0 "" "$gvisor_ldflags" "$tmp/bin/runsc" ./runsc
	build_in "$gvisor_mod@$gvisor_ver (shim)" "$gvisor_dir" runsc-shim 0 "" "$gvisor_ldflags" "$tmp/bin/containerd-shim-runsc-v1" ./shim
	build_in "$k8s_mod@$k8s_ver (kubelet)" "$mod_dir" kubelet 0 "" "$k8s_ldflags" "$tmp/bin/kubelet" k8s.io/kubernetes/cmd/kubelet
	local b
	for b in "${bins[@]}"; do
		[[ -x $tmp/bin/$b ]] || die "the build made no $b (logs: $logs)"
	done
	{
		printf 'key %s\n%s\nlibseccomp-dev %s\n%s\nbuilt %s in %ss\n' "$key" "$go_version" "$seccomp_version" "$build_flags" "$(date -u +%FT%TZ)" "$((SECONDS - t0))"
		(cd "$tmp/bin" && ls -l "${bins[@]}")
	} >"$tmp/stamp"
	mv -T "$tmp" "$out"
	trap - EXIT
	printf '%s: build took %ss (%s)\n' "$me" "$((SECONDS - t0))" "$bin"
}

case $phase in
download) do_download ;;
build) do_build ;;
all)
	do_download
	do_build
	;;
esac
