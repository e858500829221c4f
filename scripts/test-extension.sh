#!/usr/bin/env bash
# Builds the Talos extension image and checks it: scripts/build-extension.sh
# (the `ship` profile's musl binaries, the OCI image), then the slow tier's
# tests against that output, found through SR_EXTENSION_OUT:
# tests/extension.rs (the image), tests/extension_container.rs (run as
# machined runs it) and tests/kernels.rs (both static binaries on Talos's
# amd64 and arm64 kernel lines under QEMU; both need the cache of
# scripts/test-env/fetch-debian.sh). The slow tier of scripts/test.sh does the
# same; this runs it alone, for CI logs and people.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export EXTENSION_TARGET_DIR=${EXTENSION_TARGET_DIR:-$root/target/extension}
export SR_EXTENSION_OUT=${SR_EXTENSION_OUT:-$root/out}
"$root/scripts/install-test-deps.sh"
OUT=$SR_EXTENSION_OUT "$root/scripts/build-extension.sh"
cd "$root"
exec cargo test --locked --test extension --test extension_container --test kernels -- "$@"
