#!/usr/bin/env bash
# Sets up a fresh machine and runs every test: Rust unit tests, the cross-crate tests that
# drive the real zinc binary and plugin files, on the CPU tier and on lavapipe.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cargo build --workspace --locked
bash scripts/build-test-fixtures.sh
cargo test --workspace --locked
