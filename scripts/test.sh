#!/usr/bin/env bash
# The project's test command: installs what the tests need, runs the lints,
# then the tests in five tiers, in this order:
#   unit         no root, nothing on the host changed: the library's and the
#                binary's own tests, property tests of the parsers, fixture
#                trees, TLS in-process over loopback
#   api          the test API server (the test-api crate, `cargo test -p
#                test-api`): its own tests, kubectl v1.32 and kube-rs against
#                it on loopback, the kubectl patch oracle (no root)
#   controller   the readiness-gate controller (the controller/ crate, `cargo
#                test -p sandbox-readiness-controller`): its pure tables, then
#                its binary (built once) against a management and a workload
#                test API server: the played rollout, faults, kubectl wait
#                (no root)
#   integration  the real kernel (user namespaces), private containerds
#                (Debian's 1.6 and sid's 2.1), runsc sandboxes, real agents
#                and `check` over sockets (root)
#   slow         the Talos extension image: built here first (`ship` musl
#                binaries for x86_64 and aarch64), then checked by the tests;
#                both static binaries booted under QEMU on Talos's kernel
#                lines (Debian's amd64 and arm64 6.1, 6.12 and newest) and
#                the extension run as machined runs it (containerd 2.1, runc,
#                the service spec)
# The parts from other Debian suites (kernels, arm64 busybox, containerd 2.1,
# runc 1.3) are
# fetched once into a cache outside the checkout by
# scripts/test-env/fetch-debian.sh, which scripts/install-test-deps.sh runs.
# Before the slow tier, a size gate on both shipped static binaries (x86_64
# and aarch64, Cargo's `ship` profile): 4 MiB each, no unwind tables.
#
# Each tier prints its counts; the last lines are one per tier and a total,
# each alone on its line: `<tier>: N passed, N failed, N skipped`. A skipped
# test is one that called common::skip (it wrote a line to $SR_SKIP_LOG and
# libtest counted it as passed) or one marked #[ignore]; re-exec helpers
# (`reexec_helper_*`) are not tests and are filtered out.
#
# Environment: TEST_THREADS (libtest threads, default 4), SR_EXTENSION_OUT
# (where the image is built, default out/), EXTENSION_TARGET_DIR (its cargo
# target dir, default target/extension), SR_TEST_CACHE (the Debian parts'
# cache, default /var/cache/sandbox-readiness-tests).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Every tests/*.rs is in exactly one tier (checked below).
unit_tests=(fuzz_parsers generated_proto gvisor_fixtures tls)
integration_tests=(canary check_desired check_machines check_nodes check_pool check_scale check_tls check_wait cri_live faults gate_agents gvisor_e2e
	identities gvisor_runsc hostile hostile_host lockout metrics node_condition node_runtime pod_userns polling serve_grpc
	serve_tls userns_kernel)
slow_tests=(extension extension_container kernels)
# Neither shipped static binary (x86_64, aarch64) may grow past this (bytes).
size_limit=$((4 * 1024 * 1024))
ship_targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)

threads=${TEST_THREADS:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

check_tiers() {
	local f name listed=" ${unit_tests[*]} ${integration_tests[*]} ${slow_tests[*]} " bad=0
	for f in tests/*.rs; do
		name=$(basename "$f" .rs)
		case $listed in
		*" $name "*) ;;
		*)
			echo "scripts/test.sh: tests/$name.rs is in no tier; add it to one" >&2
			bad=1
			;;
		esac
	done
	for name in $listed; do
		[ -f "tests/$name.rs" ] || {
			echo "scripts/test.sh: tier lists $name, but tests/$name.rs does not exist" >&2
			bad=1
		}
	done
	return $bad
}

# Sums libtest's `test result:` lines of a log: prints "passed failed ignored".
count_results() {
	awk '/^test result:/ {
		for (i = 1; i < NF; i++) {
			if ($(i + 1) ~ /^passed;?$/) p += $i
			if ($(i + 1) ~ /^failed;?$/) f += $i
			if ($(i + 1) ~ /^ignored;?$/) g += $i
		}
	} END { print p + 0, f + 0, g + 0 }' "$1"
}

declare -A counts
tiers=()
overall=0

# Runs one tier: `run_tier NAME CARGO-TEST-ARGS...`; records its counts.
run_tier() {
	local name=$1
	shift
	local log=$work/$name.log skips=$work/$name.skips rc=0 start=$SECONDS
	: >"$skips"
	echo "== $name tests"
	SR_SKIP_LOG=$skips cargo test --locked --no-fail-fast "$@" -- \
		--test-threads="$threads" --skip reexec_helper_ 2>&1 | tee "$log" || rc=$?
	local passed failed ignored skipped
	read -r passed failed ignored < <(count_results "$log")
	skipped=$(wc -l <"$skips")
	# libtest counted each common::skip as a pass.
	passed=$((passed - skipped))
	skipped=$((skipped + ignored))
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		# A build error or a test binary that died before its summary.
		echo "== $name: cargo test exited $rc with no failed test counted (build error or crashed test binary)"
		failed=1
	fi
	if [ -s "$skips" ]; then
		sed 's/^/SKIPPED /' "$skips"
	fi
	grep -h '^test .* \.\.\. ignored' "$log" | sed 's/^/SKIPPED (ignored) /' || true
	echo "== $name tier: $passed passed, $failed failed, $skipped skipped ($((SECONDS - start)) s)"
	counts[$name]="$passed $failed $skipped"
	tiers+=("$name")
	[ "$failed" -eq 0 ] || overall=1
}

test_args() { # --test NAME for each name
	local t
	for t in "$@"; do printf -- '--test\n%s\n' "$t"; done
}

check_tiers

scripts/install-test-deps.sh

echo "== fmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --all-targets --locked -- -D warnings
cargo clippy -p test-api --all-targets --locked -- -D warnings
cargo clippy -p sandbox-readiness-controller --all-targets --locked -- -D warnings
# The shipped build: the static musl target, without the tests.
cargo clippy --locked --target x86_64-unknown-linux-musl --lib --bins -- -D warnings
echo "== docs"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --lib --quiet
echo "== unused dependencies"
cargo machete
echo "== module graph (fails on an import cycle in src/)"
python3 scripts/modgraph.py src

mapfile -t args < <(test_args "${unit_tests[@]}")
run_tier unit --lib --bins "${args[@]}"

# Every test of the test-api crate (its tests/ are not the node crate's tiers).
run_tier api -p test-api

# The controller crate's own tests (its tests/ are not the node crate's tiers).
run_tier controller -p sandbox-readiness-controller

mapfile -t args < <(test_args "${integration_tests[@]}")
run_tier integration "${args[@]}"

echo "== extension image"
export EXTENSION_TARGET_DIR=${EXTENSION_TARGET_DIR:-$root/target/extension}
export SR_EXTENSION_OUT=${SR_EXTENSION_OUT:-$root/out}
if ! OUT=$SR_EXTENSION_OUT scripts/build-extension.sh; then
	# The slow tier then fails with the missing image as its reason.
	echo "== extension image: scripts/build-extension.sh failed"
	overall=1
fi

echo "== controller image"
# The controller's OCI image (static musl binary, no base image); its digest
# is in the output. Built in the extension's target dir, which already holds
# the node crate's release musl build.
if ! OUT=$SR_EXTENSION_OUT CONTROLLER_TARGET_DIR=$EXTENSION_TARGET_DIR scripts/build-controller-image.sh; then
	echo "== controller image: scripts/build-controller-image.sh failed"
	overall=1
fi

echo "== size gate"
# The binaries scripts/build-extension.sh just built with
# `cargo build --profile ship --locked --target <arch>-unknown-linux-musl`:
# each within 4 MiB, and neither with unwind tables (build.rs drops them).
for target in "${ship_targets[@]}"; do
	bin=$EXTENSION_TARGET_DIR/$target/ship/sandbox-readiness
	if [ ! -f "$bin" ]; then
		echo "size gate: FAILED: no $target ship binary at $bin"
		overall=1
		continue
	fi
	size=$(stat -c %s "$bin")
	if [ "$size" -gt "$size_limit" ]; then
		echo "size gate: FAILED: $bin is $size bytes, over the $size_limit-byte (4 MiB) budget"
		overall=1
	else
		echo "size gate: ok: $bin is $size bytes (budget $size_limit)"
	fi
	# What may stay: crtbegin/crtend's few bytes of .eh_frame (x86_64: 80),
	# which the link needs (link/discard-eh-frame.ld); never a .eh_frame_hdr.
	eh=$(readelf -SW "$bin" | sed -n 's/.* \.eh_frame  *PROGBITS  *[0-9a-f]*  *[0-9a-f]*  *\([0-9a-f]*\) .*/\1/p')
	if readelf -SW "$bin" | grep -q '\.eh_frame_hdr ' || [ "$((16#${eh:-0}))" -gt 256 ]; then
		echo "size gate: FAILED: $bin carries unwind tables (.eh_frame $((16#${eh:-0})) bytes)"
		overall=1
	else
		echo "size gate: ok: $bin has no unwind tables (.eh_frame: $([ -n "$eh" ] && echo "$((16#$eh)) bytes of crtbegin/crtend" || echo none))"
	fi
done

mapfile -t args < <(test_args "${slow_tests[@]}")
run_tier slow "${args[@]}"

echo "== summary"
total_p=0 total_f=0 total_s=0
for t in "${tiers[@]}"; do
	read -r p f s <<<"${counts[$t]}"
	echo "$t: $p passed, $f failed, $s skipped"
	total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
done
echo "total: $total_p passed, $total_f failed, $total_s skipped"
exit "$overall"
