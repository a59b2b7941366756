#!/usr/bin/env bash
# Builds the plugin built against a foreign interface version, in its own workspace so its
# plugin-api feature never reaches zinc's build. Shares zinc's target directory and lock file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fixture="$root/tests/fixtures/old-interface-plugin"
cp "$root/Cargo.lock" "$fixture/Cargo.lock"
cargo build --quiet --manifest-path "$fixture/Cargo.toml" --target-dir "${CARGO_TARGET_DIR:-$root/target}"
