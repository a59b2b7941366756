#!/usr/bin/env bash
# Compiles shaders/FAMILY/*.comp into the SPIR-V committed in backends/vulkan/spirv/ with glslang
# built from source (the shaderc crate; Debian's glslc is too old for integer dot products),
# and writes spirv/manifest.tsv, the hashes that let `cargo test` check the SPIR-V against the
# sources without a compiler (backends/vulkan/src/spirv_manifest.rs; what CI runs).
#   bash scripts/shaders.sh          regenerate (commit the result)
#   bash scripts/shaders.sh --check  recompile everything and fail if the committed SPIR-V differs
# The first run builds glslang, about ten minutes on two cores; users never need it, since
# `cargo build` only embeds the committed SPIR-V.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/apt-install.sh" "to build glslang" cmake ninja-build g++ python3
CARGO_TARGET_DIR="$root/target" cargo run --quiet --release --locked \
    --manifest-path "$root/tools/shader-gen/Cargo.toml" -- "$@"
