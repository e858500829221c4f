#!/usr/bin/env bash
# The pod proof's bench: on one real kubelet node (scripts/kubelet-node.sh,
# Talos 1.13.9's runtime), ROUNDS proofs of a good node, each started by a
# change of the pool's sandbox-readiness.io/prove
# (controller/tests/proof.rs `bench_proof_latency`). Prints p50 and p99 of
# the controller's added latency (the Machine's True with the proof minus
# the moment the proof pod's container was first seen running) and of the
# whole proof (the request's change to the Machine's True). Needs what the
# test command builds (the control plane, Cluster API, the node runtime).
# Root.
#
#   benches/proof.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
PATH=$(scripts/build-control-plane.sh path):$PATH
SR_CAPI_DIR=$(scripts/build-capi.sh path)
SR_NODE_RUNTIME_BIN=$(scripts/build-node-runtime.sh path)
export PATH SR_CAPI_DIR SR_NODE_RUNTIME_BIN
SR_PROOF_ROUNDS=${1:-40} cargo test --locked -p sandbox-readiness-controller --test proof -- \
	--ignored --exact bench_proof_latency --nocapture 2>/dev/null | grep '^bench proof:'
