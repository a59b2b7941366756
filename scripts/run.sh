#!/usr/bin/env bash
# Sets up a fresh machine, builds zinc in release mode, and runs its main job on the default
# model. Until a backend executes model programs, the main job is showing which backend zinc
# chose for this node.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cargo build --release --workspace --locked
exec target/release/zinc probe
