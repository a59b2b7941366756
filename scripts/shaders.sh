#!/usr/bin/env bash
# Compiles shaders/*.comp into the SPIR-V committed in backends/vulkan/spirv/ with glslang
# built from source (the shaderc crate; Debian's glslc is too old for integer dot products).
#   bash scripts/shaders.sh          regenerate (commit the result)
#   bash scripts/shaders.sh --check  fail if the committed SPIR-V is stale (CI runs this)
# The first run builds glslang, about ten minutes on two cores; users never need it, since
# `cargo build` only embeds the committed SPIR-V.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
need_apt=()
for tool in cmake:cmake ninja:ninja-build g++:g++ python3:python3; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
if ((${#need_apt[@]})); then
    echo "shaders: installing ${need_apt[*]} to build glslang" >&2
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
CARGO_TARGET_DIR="$root/target" cargo run --quiet --release --locked \
    --manifest-path "$root/tools/shader-gen/Cargo.toml" -- "$@"
