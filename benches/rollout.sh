#!/usr/bin/env bash
# The rollout bench: a 10-replica MachineDeployment (maxSurge 1,
# maxUnavailable 0) rolled by the real Cluster API v1.13.6 and CABPT v0.6.11
# onto the userns template, once gated on sandbox-readiness.io/SandboxReady
# and once not (tests/capi_rollout.rs `bench_rollout`, on the project's test
# control planes; the nodes are real agents in child user namespaces). Prints
# each run's line: the rollout's wall time and the time from each new Node's
# first True verdict to CAPI showing its Machine Ready. Needs what the test
# command builds: scripts/build-control-plane.sh, scripts/build-capi.sh and
# the workspace's test binaries. Root (user namespaces).
#
#   benches/rollout.sh [REPLICAS]
set -euo pipefail
cd "$(dirname "$0")/.."
replicas=${1:-10}
for gated in 1 0; do
	SR_BENCH_REPLICAS=$replicas SR_BENCH_GATED=$gated \
		cargo test --locked --test capi_rollout -- --ignored --exact bench_rollout --nocapture 2>/dev/null |
		grep '^bench rollout:'
done
