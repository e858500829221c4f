#!/usr/bin/env bash
# Builds the project's real test control plane from the Go module controlplane/
# (controlplane/README.md, controlplane/PINS): kube-apiserver,
# kube-controller-manager and kubectl from k8s.io/kubernetes v1.36.3, and etcd
# v3.6.8 through our own main (controlplane/cmd/etcd), in ONE `go build`, into a
# cache outside the checkout:
#
#   $SR_TEST_CACHE/controlplane/<key>/bin/{etcd,kube-apiserver,kube-controller-manager,kubectl}
#   $SR_TEST_CACHE/go/{mod,build}       GOMODCACHE and GOCACHE, shared by CI and dev
#
# <key> is a short hash of controlplane/go.mod, go.sum, the cmd/ sources, this
# script's build flags and `go version`: a change to any of them builds anew,
# anything else (a fresh checkout, a comment here) finds the cached binaries.
#
# Usage: scripts/build-control-plane.sh [download|build|all|path]
#   download  `go mod download` only (network bound; the test command starts it
#             at t = 0)
#   build     the compile (after download; downloads what is missing itself)
#   all       download then build (the default)
#   path      print the bin dir and exit 0 if it is complete; else one line on
#             stderr and exit 1. This is the way to get the bin dir: the other
#             phases print only progress lines.
# A warm `build`/`all` (bin dir complete, stamp present) builds nothing and
# prints one line. A cold build prints its wall time. Failures are one line on
# stderr naming the module and version where go names one (the full go output
# is kept under $SR_TEST_CACHE/controlplane/logs/), exit non-zero.
#
# Environment: SR_TEST_CACHE (default /var/cache/sandbox-readiness-tests), GO
# (the go command, default `go` on PATH, else /usr/local/go/bin/go),
# SR_GO_DOWNLOAD_TIMEOUT (s, default 900), SR_GO_BUILD_TIMEOUT (s, default
# 3000). GOPROXY/GOSUMDB as the environment has them.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
mod_dir=$here/controlplane
cache=${SR_TEST_CACHE:-/var/cache/sandbox-readiness-tests}
phase=${1:-all}
me=build-control-plane

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

# The release these binaries report (/version, `kubectl version`): Cluster
# API's manager refuses a v0.0.0-master server. gitCommit: built from the
# module zip, not a git checkout, so no commit is claimed; buildDate: the
# release's module time on the proxy.
k8s_version=v1.36.3
k8s_major=1
k8s_minor=36
k8s_commit=0000000000000000000000000000000000000000
k8s_build_date=2026-07-22T18:07:38Z
targets=(./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
bins=(etcd kube-apiserver kube-controller-manager kubectl)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
	ldflags+=" -X $pkg.gitCommit=$k8s_commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=$k8s_build_date"
done
ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=v3.6.8-module"
build_flags="CGO_ENABLED=0 -trimpath -ldflags=$ldflags targets=${targets[*]}"

# Disk this needs, measured on a cold run (controlplane/README.md "Figures")
# with a margin: the module cache of this graph (620 MiB) and the compile
# (GOCACHE 3.0 GiB, the four binaries 275 MiB, go's work dir under TMPDIR).
need_download_mib=800
need_build_mib=4500

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
mkdir -p "$GOMODCACHE" "$GOCACHE" "$cache/controlplane/logs" || die "cannot create the cache under $cache"

go_version=$("$go" version 2>/dev/null) || die "$go does not run"
case $go_version in
go\ version\ go1.2[6-9]* | go\ version\ go1.[3-9][0-9]*) ;;
*) die "needs Go >= 1.26 (GOTOOLCHAIN=local), found: $go_version" ;;
esac

key=$({
	cat "$mod_dir/go.mod" "$mod_dir/go.sum"
	find "$mod_dir/cmd" -type f -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 cat
	printf '%s\n%s\n' "$build_flags" "$go_version"
} | sha256sum | cut -c1-12)
out=$cache/controlplane/$key
bin=$out/bin
logs=$cache/controlplane/logs

complete() {
	[[ -f $out/stamp ]] || return 1
	local b
	for b in "${bins[@]}"; do
		[[ -x $bin/$b ]] || return 1
	done
}

if [[ $phase == path ]]; then
	complete || die "not built yet: run scripts/build-control-plane.sh all (wanted $bin)"
	printf '%s\n' "$bin"
	exit 0
fi

# free_mib PATH: free space (MiB) on the file system holding PATH.
free_mib() {
	df -Pm "$1" | awk 'NR == 2 { print $4 }'
}

# first_error LOG: the one line of go's output that names what failed
# (module@version where go says it), cleaned of URLs.
first_error() {
	local line
	line=$(grep -m1 -E '(@v[0-9]|: (reading|verifying|missing go.sum|unrecognized import|no matching|invalid version))' "$1" ||
		grep -m1 -vE '^(go: downloading|go: finding|#)' "$1" || true)
	line=${line#go: }
	# "reading https://host/path/@v/vX.info: 403 Forbidden" -> "403 Forbidden"
	line=$(printf '%s' "$line" | sed -E 's#reading https?://[^ ]+: ##; s#[[:space:]]+# #g')
	printf '%s' "${line:-see $1}"
}

do_download() {
	local log=$logs/download.log have free
	free=$(free_mib "$cache")
	if ((free < need_download_mib)); then
		# Only what is not in the module cache yet has to fit.
		have=$(du -sm "$GOMODCACHE" 2>/dev/null | cut -f1)
		((have >= need_download_mib || free >= need_download_mib - have)) ||
			die "not enough disk under $cache: $free MiB free, the module download needs about $((need_download_mib - have)) MiB more"
	fi
	local t0=$SECONDS rc=0
	(cd "$mod_dir" && timeout --foreground --kill-after=10 "${SR_GO_DOWNLOAD_TIMEOUT:-900}" "$go" mod download -x) >"$log" 2>&1 || rc=$?
	if ((rc == 124 || rc == 137)); then
		die "go mod download timed out after ${SR_GO_DOWNLOAD_TIMEOUT:-900}s (log: $log)"
	elif ((rc != 0)); then
		die "go mod download failed: $(first_error "$log") (log: $log)"
	fi
	if grep -q '^# get ' "$log"; then
		printf '%s: modules downloaded in %ss (GOMODCACHE %s, %s MiB)\n' "$me" "$((SECONDS - t0))" "$GOMODCACHE" "$(du -sm "$GOMODCACHE" | cut -f1)"
	fi
}

do_build() {
	if complete; then
		printf '%s: %s control plane cached, nothing to build (%s)\n' "$me" "$k8s_version" "$bin"
		return 0
	fi
	exec 9>"$cache/controlplane/.build.lock"
	flock 9
	# Another build may have finished while this one waited.
	if complete; then
		printf '%s: %s control plane cached, nothing to build (%s)\n' "$me" "$k8s_version" "$bin"
		return 0
	fi
	local free
	free=$(free_mib "$cache")
	((free >= need_build_mib)) ||
		die "not enough disk under $cache: $free MiB free, the build needs about $need_build_mib MiB"
	# Leftovers of an interrupted build (the lock is ours: no one else builds).
	rm -rf "$cache/controlplane/.tmp."* "$out"
	local tmp log=$logs/build.log t0=$SECONDS rc=0
	tmp=$(mktemp -d "$cache/controlplane/.tmp.$key.XXXXXX")
	mkdir "$tmp/bin"
	printf '%s: building %s (%s) into %s\n' "$me" "$k8s_version" "${bins[*]}" "$bin"
	(cd "$mod_dir" && timeout --foreground --kill-after=10 "${SR_GO_BUILD_TIMEOUT:-3000}" \
		"$go" build -trimpath -ldflags="$ldflags" -o "$tmp/bin/" "${targets[@]}") >"$log" 2>&1 || rc=$?
	if ((rc != 0)); then
		rm -rf "$tmp"
		((rc == 124 || rc == 137)) && die "go build timed out after ${SR_GO_BUILD_TIMEOUT:-3000}s (log: $log)"
		local line pkg modver
		line=$(first_error "$log")
		# A compile error names a package ("# k8s.io/..."): name its module too.
		pkg=$(grep -m1 '^# ' "$log" | cut -c3- || true)
		if [[ -n $pkg ]]; then
			modver=$( (cd "$mod_dir" && "$go" list -f '{{with .Module}}{{.Path}}{{with .Version}}@{{.}}{{end}}{{end}}' "$pkg") 2>/dev/null) || modver=
			die "go build failed in $pkg${modver:+ ($modver)}: $(grep -m1 -vE '^#' "$log" | sed -E 's#[[:space:]]+# #g') (log: $log)"
		fi
		die "go build failed: $line (log: $log)"
	fi
	local b
	for b in "${bins[@]}"; do
		[[ -x $tmp/bin/$b ]] || {
			rm -rf "$tmp"
			die "go build made no $b (log: $log)"
		}
	done
	{
		printf 'key %s\n%s\n%s\nbuilt %s in %ss\n' "$key" "$go_version" "$build_flags" "$(date -u +%FT%TZ)" "$((SECONDS - t0))"
		(cd "$tmp/bin" && ls -l "${bins[@]}")
	} >"$tmp/stamp"
	mv -T "$tmp" "$out"
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
