#!/usr/bin/env bash
# Sets up a fresh machine and runs every test: Rust unit tests, the cross-crate tests that
# drive the real zinc binary and plugin files, the server tests that talk to a real
# `zinc serve` over loopback with the official openai Python client, and the built-in page's
# tests in a real browser (Debian's Chromium, driven by Playwright).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Each phase's wall time goes to stderr, so a slow CI run shows where its minutes went.
started=$SECONDS
phase() {
    local name=$1
    shift
    local t0=$SECONDS
    "$@"
    echo "test.sh: $name took $((SECONDS - t0)) s (total $((SECONDS - started)) s)" >&2
}
# Downloads the build does not need go beside it (the build is bound by the processors, they
# by the network): the setup (lavapipe and the default model), Gemma 3 270M (Q4_K_M, checked
# against llama.cpp's outputs in tests/tests/reference.rs), the Python test client packages,
# Chromium and Playwright for the page's browser tests.
downloads() {
    bash scripts/setup.sh
    bash scripts/fetch-model.sh gemma3
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check openai pytest httpx playwright
    bash scripts/apt-install.sh "the page's browser tests" chromium
    bash scripts/test-aarch64.sh --setup
    echo "test.sh: the downloads beside the build took $((SECONDS - started)) s" >&2
}
downloads_log=$(mktemp)
downloads >"$downloads_log" 2>&1 &
downloads_pid=$!
# The committed SPIR-V is checked against the shader sources by a unit test of the vulkan crate
# (its manifest's hashes), so CI builds no glslang; `bash scripts/shaders.sh --check` recompiles.
phase "kfd kernels check" bash backends/kfd/kernels/build.sh --check
phase "build" cargo build --workspace --locked
if ! wait "$downloads_pid"; then
    cat "$downloads_log" >&2
    echo "test.sh: the downloads beside the build failed (output above)" >&2
    exit 1
fi
tail -n 1 "$downloads_log" >&2
# After the build, not beside it: on two processors the two builds together took longer than
# one after the other.
phase "fixtures" bash scripts/build-test-fixtures.sh
# Libraries, binaries and test targets; not doc tests: there are none, and rustdoc's pass over
# every crate to find that out is CI time for nothing.
phase "cargo tests" cargo test --workspace --locked --lib --bins --tests
phase "32-wide subgroup kernels" bash scripts/test-wide-subgroups.sh
# Coverage-guided fuzzing, 8 s a target (two at a time) on top of the debug build just made:
# a smoke run that CI's budget affords; `bash scripts/fuzz.sh` runs 5 minutes each.
phase "fuzz" bash scripts/fuzz.sh 8
phase "aarch64 tests" bash scripts/test-aarch64.sh
phase "server tests" .venv/bin/python -m pytest -q tests/server
phase "browser tests" .venv/bin/python -m pytest -q tests/browser
