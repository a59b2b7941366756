#!/usr/bin/env bash
# Sets up a fresh machine and runs every test: Rust unit tests, the cross-crate tests that
# drive the real zinc binary and plugin files, and the server tests that talk to a real
# `zinc serve` over loopback with the official openai Python client.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
# Gemma 3 270M (Q4_K_M), checked against llama.cpp's outputs in tests/tests/reference.rs.
bash scripts/fetch-model.sh gemma3
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check openai pytest httpx
# The committed SPIR-V is checked against the shader sources by a unit test of the vulkan crate
# (its manifest's hashes), so CI builds no glslang; `bash scripts/shaders.sh --check` recompiles.
bash backends/kfd/kernels/build.sh --check
cargo build --workspace --locked
bash scripts/build-test-fixtures.sh
cargo test --workspace --locked
bash scripts/test-aarch64.sh
.venv/bin/python -m pytest -q tests/server
