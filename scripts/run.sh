#!/usr/bin/env bash
# Sets up a fresh machine, builds zinc in release mode, and runs its main job: serving the
# default model (SmolLM2-135M-Instruct Q4_1) over the OpenAI-compatible API on loopback,
# with its chat page at the root URL it prints, on the best backend this node has. Stop it
# with Ctrl-C.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cargo build --release --workspace --locked
target/release/zinc probe
exec target/release/zinc serve "$@"
