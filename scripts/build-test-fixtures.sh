#!/usr/bin/env bash
# Builds the plugin built against a foreign interface version, in its own workspace so its
# plugin-api feature never reaches zinc's build, and in its own target folder: its
# dependencies' features differ from the workspace's, so it could reuse none of that build,
# and on its own it can be built while the workspace builds (scripts/test.sh does). The plugin
# is then copied beside the workspace's debug build, where the tests look for it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fixture="$root/tests/fixtures/old-interface-plugin"
cp "$root/Cargo.lock" "$fixture/Cargo.lock"
cargo build --quiet --manifest-path "$fixture/Cargo.toml" --target-dir "$root/target/fixture"
mkdir -p "$root/target/debug"
cp "$root/target/fixture/debug/libzinc_fixture_foreign.so" "$root/target/debug/"
