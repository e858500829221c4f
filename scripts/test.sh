#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs the
# lints and every test (unit, property, real kernel, real containerd, real
# runsc, gRPC over sockets, the Talos extension image).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

echo "== fmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== tests"
# Property tests run a bounded number of cases (proptest default, 256 each).
cargo test --locked --lib --bins --tests -- --test-threads="${TEST_THREADS:-4}"
