#!/usr/bin/env bash
# The project's test command: installs what the tests need, runs the lints,
# builds every test binary of the workspace ONCE (one feature set), then runs
# them in five tiers (tests/tiers.toml says which binary is in which, and what
# each tier needs) through scripts/run-tests.py:
#   unit, api, controller   no root (the node crate's own tests, the fault
#                           proxy, the readiness-gate controller)
#   integration             the real kernel, private containerds, runsc (root);
#                           the real control plane with Cluster API and CABPT
#                           (the docs' examples dry-run, real rollouts)
#   slow                    the extension image, QEMU kernels, machined's
#                           container
# and, between unit and api, scripts/test-control-plane.sh (the control-plane
# tier: scripts/control-plane.sh and `capi` on the real binaries).
#
# The Go-built parts start at t = 0 in the background into caches outside the
# checkout (a warm run builds none): the Talos oracle and the control plane
# (kube-apiserver, kube-controller-manager, kubectl, etcd), and beside them
# Cluster API and CABPT (scripts/build-capi.sh).
#
# Timeline (two cores): the install step (apt, the Debian fetch, grpcurl,
# the Rust musl targets) starts at t = 0 in the background while fmt, the
# lints, clippy and the test build run; the tiers wait for it. The shipped
# musl builds (both targets in one cargo call, then the controller's image
# binary, in target/extension) start once the test build is done, in a
# scheduling group of their own at the lowest weight, so they take the cores
# only while the tests wait on sockets, sandboxes and timers. Before the slow
# tier the images are packaged from those builds and a size gate checks both
# shipped static binaries (x86_64 and aarch64, Cargo's `ship` profile, the
# node build): 3.5 MiB each, no unwind tables.
#
# The last lines are one per tier and a total, each alone on its line:
# `<tier>: N passed, N failed, N skipped`, after a table of every step with
# its wall seconds. A skipped test is one that called common::skip or is
# marked #[ignore]; re-exec helpers (`reexec_helper_*`) are not tests.
#
# Environment: TEST_THREADS / TEST_JOBS (override tests/tiers.toml's libtest
# threads and binaries at once), SR_EXTENSION_OUT (where the images are built,
# default out/), EXTENSION_TARGET_DIR (the shipped builds' target dir, default
# target/extension), SR_TEST_CACHE (the Debian parts' cache, default
# /var/cache/sandbox-readiness-tests), CARGO_INCREMENTAL (default 0 here:
# incremental data is nearly half the test build's target dir, 3.4 of 7.4 GiB,
# for a saving a one-shot build never sees; 1 for a developer's loop),
# SR_SHIP_LOW=0 (the shipped builds at the normal weight, on a machine where
# other work would starve them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Neither shipped static binary (x86_64, aarch64) may grow past this (bytes).
# 3.5 MiB: the x86_64 node build (static PIE, no `operator` feature) ships at
# about 3.43 MiB, so 2 % of headroom (docs/developer/binary.md, "Size").
size_limit=$((3500 * 1024 * 1024 / 1000))
ship_targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export EXTENSION_TARGET_DIR=${EXTENSION_TARGET_DIR:-$root/target/extension}
export SR_EXTENSION_OUT=${SR_EXTENSION_OUT:-$root/out}

work=$(mktemp -d)
steps=$work/steps results=$work/results
: >"$steps"
: >"$results"
bg_pids=()
inotify_saved=()
cleanup() {
	local pid
	for pid in "${bg_pids[@]}"; do
		kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
	done
	if ((${#inotify_saved[@]})); then inotify_restore; fi
	rm -rf "$work"
}
trap cleanup EXIT
overall=0
t0=$SECONDS

# `timed NAME CMD...`: runs CMD, records "NAME start-offset seconds rc".
timed() {
	local name=$1 start=$SECONDS rc=0
	shift
	"$@" || rc=$?
	echo "$name $((start - t0)) $((SECONDS - start)) $rc" >>"$steps"
	return "$rc"
}

# `background NAME LOG CMD...`: timed CMD in the background, in a session
# and scheduling group of its own (so it can be killed as a group and, with
# LOW=1, yields the cores to everything else); its pid is in $bg_pid.
background() {
	local name=$1 log=$2
	shift 2
	setsid bash -c '
		[ "${LOW:-}" != 1 ] || echo 19 >/proc/self/autogroup 2>/dev/null || true
		log=$1
		shift
		rc=0
		"$@" || rc=$?
		echo "$SECONDS" >"$log.secs"
		exit "$rc"' bash "$log" "$@" >"$log" 2>&1 &
	bg_pid=$!
	bg_pids+=("$bg_pid")
	echo "$name $bg_pid $((SECONDS - t0))" >>"$work/bg"
}

# `await NAME PID LOG`: waits for a background step; prints its log; records it.
await() {
	local name=$1 pid=$2 log=$3 rc=0 started
	wait "$pid" || rc=$?
	started=$(awk -v n="$name" '$1 == n {print $3}' "$work/bg")
	echo "== $name (background, exit $rc)"
	cat "$log"
	# Its own wall time (it may have ended long before this wait).
	echo "$name $started $(cat "$log.secs" 2>/dev/null || echo "$((SECONDS - t0 - started))") $rc" >>"$steps"
	# A failed step's last lines again at the end, beside the summary: the
	# log above is far back in a long output.
	[ "$rc" -eq 0 ] || { echo "== $name failed (exit $rc); its last lines:"; tail -n 40 "$log"; } >>"$work/failed-tails"
	return "$rc"
}

# What the tests may leave on the host (processes, mounts, interfaces,
# iptables chains, sysctls, runsc's and kubelet's cgroups), recorded before
# anything starts; compared after the last tier (scripts/host-state.py).
python3 scripts/host-state.py snapshot "$work/host.before"

# The inotify limits, raised for the run (never lowered) and restored before
# the host check: a kube-apiserver holds about 6 inotify instances, a kubelet
# with its containerd 18, each Cluster API manager 1, and the tiers run tens
# of them side by side — near Debian's 128 per user, past it with anything
# else on the machine (a manager then exits: "too many open files"). The
# values are kind's, the ones scripts/kubelet-node.sh raises to while a node
# is up (it saves and restores what it finds: these).
inotify_floor=(fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=524288)
inotify_saved=()
for f in "${inotify_floor[@]}"; do
	inotify_saved+=("${f%%=*}=$(sysctl -n "${f%%=*}")")
	if (($(sysctl -n "${f%%=*}") < ${f#*=})); then
		sysctl -q -w "$f" >/dev/null || echo "warning: cannot raise $f"
	fi
done
inotify_restore() {
	local f
	for f in "${inotify_saved[@]}"; do
		sysctl -q -w "$f" >/dev/null 2>&1 || echo "warning: cannot restore $f"
	done
	inotify_saved=()
}

# A cold run writes about 8 GiB into target/ and 15 GiB of Go builds and
# Debian parts into the caches. A disk that fills mid-run fails whichever
# build writes next, with an error far from its cause (a CI run on a disk
# with about 3 GiB free showed only the shipped build's exit 101). Said
# first, in one line, and not enforced: a warm run needs far less.
free_gib=$(($(df -Pk "$root" | awk 'NR == 2 {print $4}') / 1024 / 1024))
if ((free_gib < 25)); then
	echo "warning: $free_gib GiB free on $root's filesystem; a cold run needs about 25 GiB (target/, the Go and Debian caches)"
fi

echo "== install (background, from t = 0)"
background install "$work/install.log" scripts/install-test-deps.sh
install_pid=$bg_pid
# The Go-built parts, into their caches outside the checkout, beside the
# Rust build from t = 0 (a warm run finds them and builds nothing): the Talos
# oracle (talos-oracle/, pkg/machinery at CABPT's and the node's versions),
# then the real control plane (kube-apiserver, kube-controller-manager,
# kubectl and etcd from controlplane/'s Go module, one `go build`).
echo "== Go builds: Talos oracle, control plane (background, from t = 0)"
background gobuild "$work/gobuild.log" bash -c '
	set -e
	start=$SECONDS
	scripts/build-talos-oracle.sh build >/dev/null
	echo "talos oracle: $((SECONDS - start)) s"
	start=$SECONDS
	scripts/build-control-plane.sh all
	echo "control plane: $((SECONDS - start)) s"'
gobuild_pid=$bg_pid
# The real Cluster API manager and CABPT (scripts/build-capi.sh: each module's
# own graph, cached; the CRD and webhook manifests staged from the same
# archives), for the tests that run them on the real control plane; then
# Helm v4 (scripts/build-helm.sh), for the controller's chart; then Prometheus
# with Kubernetes service discovery (scripts/build-prometheus.sh).
echo "== Go builds: Cluster API, CABPT, Helm, Prometheus (background, from t = 0)"
background capibuild "$work/capibuild.log" bash -c '
	set -e
	start=$SECONDS
	scripts/build-capi.sh build
	echo "cluster api + cabpt: $((SECONDS - start)) s"
	start=$SECONDS
	scripts/build-helm.sh build
	echo "helm: $((SECONDS - start)) s"
	start=$SECONDS
	scripts/build-prometheus.sh build
	echo "prometheus: $((SECONDS - start)) s"'
capibuild_pid=$bg_pid

echo "== fmt"
timed fmt cargo fmt --all -- --check
echo "== lints (unused dependencies, module graph)"
timed lints bash -c 'python3 scripts/unused-deps.py && python3 scripts/modgraph.py src'
echo "== clippy (the workspace, all targets, one feature set)"
timed clippy cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== build tests (the workspace, once)"
timed "build-tests" bash -c 'cargo test --workspace --locked --no-run --message-format=json-render-diagnostics \
	>"$1"' bash "$work/artifacts.json"
timed "tier-check" python3 scripts/run-tests.py check "$work/artifacts.json"

# The shipped builds need the musl targets and clang from the install step.
await install "$install_pid" "$work/install.log"
echo "== shipped builds (background, lowest weight)"
LOW=${SR_SHIP_LOW:-1} background ship "$work/ship.log" bash -c '
	set -e
	export CARGO_TARGET_DIR=$EXTENSION_TARGET_DIR
	# The shipped build'"'"'s own lint: the static musl target, without the tests.
	cargo clippy --locked --target x86_64-unknown-linux-musl --lib --bins -- -D warnings
	cargo clippy --locked --target x86_64-unknown-linux-musl --no-default-features --bins -- -D warnings
	# The operator build of both targets (kept as sandbox-readiness-operator:
	# tests/kernels.rs asks the agent in the VM with its check), then the node
	# build the extension carries and the size gate measures: serve and probe
	# (scripts/build-extension.sh does the same with EXTENSION_OPERATOR=1).
	cargo build --profile ship --locked --bin sandbox-readiness \
		--target x86_64-unknown-linux-musl --target aarch64-unknown-linux-musl
	for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
		cp -f "$CARGO_TARGET_DIR/$t/ship/sandbox-readiness" "$CARGO_TARGET_DIR/$t/ship/sandbox-readiness-operator"
	done
	cargo build --profile ship --locked --no-default-features --bin sandbox-readiness \
		--target x86_64-unknown-linux-musl --target aarch64-unknown-linux-musl
	cargo build --profile image --locked -p sandbox-readiness-controller \
		--bin sandbox-readiness-controller --target x86_64-unknown-linux-musl --target aarch64-unknown-linux-musl'
ship_pid=$bg_pid

echo "== docs"
RUSTDOCFLAGS="-D warnings" timed docs cargo doc --workspace --locked --no-deps --lib --quiet

# The unit tier's Talos oracle tests and every Kubernetes-facing tier need
# the Go builds.
await gobuild "$gobuild_pid" "$work/gobuild.log" || {
	echo "== Go builds failed: the oracle and Kubernetes-facing tests fail"
	overall=1
}
# One kubectl for every test: the pinned v1.36.3 of the control-plane build
# (the machine's own is of another minor, outside kubectl's one-minor skew
# against these servers), first on PATH for every tier and child process.
if cp_bin=$(scripts/build-control-plane.sh path); then
	export SR_CONTROL_PLANE_BIN=$cp_bin
	export PATH=$cp_bin:$PATH
	echo "kubectl for every test: $(command -v kubectl) ($(kubectl version --client -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'))"
fi
# The real node's runtime (scripts/build-node-runtime.sh: kubelet, containerd
# 2.2, runc, runsc and its shim, the CNI plugins; pins in controlplane/PINS),
# once the control plane's build has filled the Go cache kubelet shares with
# it and the install step has brought libseccomp-dev; the integration tier's
# kubelet matrix waits for it.
echo "== Go builds: the node runtime (background, after the control plane)"
background nodebuild "$work/nodebuild.log" bash -c '
	set -e
	start=$SECONDS
	scripts/build-node-runtime.sh all
	echo "node runtime: $((SECONDS - start)) s"'
nodebuild_pid=$bg_pid
if oracle_env=$(scripts/build-talos-oracle.sh path); then
	set -a
	eval "$oracle_env"
	set +a
fi

# The control-plane tier runs `capi` and the integration tier dry-runs the
# docs' examples against the real Cluster API and CABPT.
await capibuild "$capibuild_pid" "$work/capibuild.log" || {
	echo "== Cluster API build failed: the tests that run it fail"
	overall=1
}
if capi_dir=$(scripts/build-capi.sh path); then
	export SR_CAPI_DIR=$capi_dir
fi
if helm_bin=$(scripts/build-helm.sh path); then
	export SR_HELM_BIN=$helm_bin
fi
if prometheus_bin=$(scripts/build-prometheus.sh path); then
	export SR_PROMETHEUS_BIN=$prometheus_bin
fi

echo "== unit tests"
timed "tier-unit" python3 scripts/run-tests.py run "$work/artifacts.json" unit "$results" || overall=1
if [ -n "${SR_CONTROL_PLANE_BIN:-}" ]; then
	echo "== control plane tests (scripts/control-plane.sh on the real binaries)"
	start=$SECONDS
	timed "tier-control-plane" scripts/test-control-plane.sh 2>&1 | tee "$work/control-plane.log" || overall=1
	read -r cp_p cp_f < <(sed -n 's/^control-plane: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$work/control-plane.log" | tail -n1)
	echo "control-plane ${cp_p:-0} ${cp_f:-1} 0 $((SECONDS - start))" >>"$results"
else
	echo "control-plane 0 1 0 0" >>"$results"
fi

for tier in api controller integration; do
	if [ "$tier" = integration ]; then
		await nodebuild "$nodebuild_pid" "$work/nodebuild.log" || {
			echo "== the node runtime's build failed: the kubelet matrix fails"
			overall=1
		}
		if nr_bin=$(scripts/build-node-runtime.sh path); then
			export SR_NODE_RUNTIME_BIN=$nr_bin
		fi
	fi
	echo "== $tier tests"
	timed "tier-$tier" python3 scripts/run-tests.py run "$work/artifacts.json" "$tier" "$results" || overall=1
done

if await ship "$ship_pid" "$work/ship.log"; then
	echo "== extension image"
	timed "image-extension" env OUT="$SR_EXTENSION_OUT" EXTENSION_NO_CARGO=1 scripts/build-extension.sh || {
		# The slow tier then fails with the missing image as its reason.
		echo "== extension image: scripts/build-extension.sh failed"
		overall=1
	}
	echo "== controller image"
	# The controller's OCI image for amd64 and arm64 (static musl binaries,
	# no base image, each run before it is packed); its
	# digest is in the output.
	timed "image-controller" env OUT="$SR_EXTENSION_OUT" CONTROLLER_NO_CARGO=1 \
		CONTROLLER_TARGET_DIR="$EXTENSION_TARGET_DIR" scripts/build-controller-image.sh || {
		echo "== controller image: scripts/build-controller-image.sh failed"
		overall=1
	}
else
	echo "== shipped builds failed: no images, and the size gate fails"
	overall=1
fi

echo "== size gate"
# The binaries the shipped build made with
# `cargo build --profile ship --locked --no-default-features --target <arch>-unknown-linux-musl`:
# each within 3.5 MiB, and neither with unwind tables (build.rs drops them).
for target in "${ship_targets[@]}"; do
	bin=$EXTENSION_TARGET_DIR/$target/ship/sandbox-readiness
	if [ ! -f "$bin" ]; then
		echo "size gate: FAILED: no $target ship binary at $bin"
		overall=1
		continue
	fi
	size=$(stat -c %s "$bin")
	if [ "$size" -gt "$size_limit" ]; then
		echo "size gate: FAILED: $bin is $size bytes, over the $size_limit-byte (3.5 MiB) budget"
		overall=1
	else
		echo "size gate: ok: $bin is $size bytes (budget $size_limit)"
	fi
	# What may stay: crtbegin/crtend's few bytes of .eh_frame (x86_64: 80),
	# which the link needs (link/discard-eh-frame.ld); never a .eh_frame_hdr.
	eh=$(readelf -SW "$bin" | sed -n 's/.* \.eh_frame  *PROGBITS  *[0-9a-f]*  *[0-9a-f]*  *\([0-9a-f]*\) .*/\1/p')
	if readelf -SW "$bin" | grep '\.eh_frame_hdr ' >/dev/null || [ "$((16#${eh:-0}))" -gt 256 ]; then
		echo "size gate: FAILED: $bin carries unwind tables (.eh_frame $((16#${eh:-0})) bytes)"
		overall=1
	else
		echo "size gate: ok: $bin has no unwind tables (.eh_frame: $([ -n "$eh" ] && echo "$((16#$eh)) bytes of crtbegin/crtend" || echo none))"
	fi
done

echo "== slow tests"
timed "tier-slow" python3 scripts/run-tests.py run "$work/artifacts.json" slow "$results" || overall=1

echo "== host left clean"
inotify_restore
timed host-clean python3 scripts/host-state.py diff "$work/host.before" || overall=1

echo "== steps (wall seconds; background steps overlap the ones after them)"
# Budget per step on a fresh 2-core machine, cold (README "Test time").
declare -A budget=(
	[install]=600 [gobuild]=1800 [capibuild]=1200 [nodebuild]=1200 [tier-control-plane]=120 [clippy]=420 [build-tests]=480 [docs]=120 [ship]=900
	[tier-unit]=120 [tier-api]=120 [tier-controller]=240 [tier-integration]=420 [tier-slow]=240 [host-clean]=60
)
printf '%-18s %7s %7s %7s %s\n' step start wall budget exit
while read -r name start secs rc; do
	printf '%-18s %7s %7s %7s %s\n' "$name" "$start" "$secs" "${budget[$name]:--}" "$rc"
done <"$steps"
printf '%-18s %7s %7s\n' total 0 "$((SECONDS - t0))"

if [ -s "$work/failed-tails" ]; then cat "$work/failed-tails"; fi
echo "== summary"
total_p=0 total_f=0 total_s=0
while read -r t p f s _; do
	echo "$t: $p passed, $f failed, $s skipped"
	total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
done <"$results"
echo "total: $total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ] || overall=1
exit "$overall"
