#!/usr/bin/env bash
# Builds the Talos extension image and checks it: the tests in
# tests/extension.rs run scripts/build-extension.sh themselves (once per test
# run), so this is `cargo test --test extension` with the build's output shown
# first, for CI logs and for people.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/build-extension.sh"
cd "$root"
exec cargo test --locked --test extension -- "$@"
