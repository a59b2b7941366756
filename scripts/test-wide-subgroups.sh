#!/usr/bin/env bash
# The Vulkan suite again on lavapipe with 32-wide subgroups: the kernels that need that width
# (the decode products' subgroup row sums, matmul_q8 `sg`; the one-row attention's softmax at a
# GPU's width) are otherwise only run on a GPU, since CI's lavapipe has 8-wide subgroups.
# lavapipe with 1024-bit vectors (LP_NATIVE_VECTOR_WIDTH) has 32-wide ones. Two things are
# left out, each because it fails at that width on Mesa 22.3 and passes on an H100's 32 lanes:
#   - integer dot products (`int_dot = false`) in the subgroup-sum products;
#   - the MoE tests (`--skip moe`): the expert kernels.
# Both are right while a row has at most 16 blocks and wrong from 17 (lane 16 takes a block):
# lavapipe run past its maximum vector width (gallivm's LP_MAX_VECTOR_WIDTH is 512 bits, and
# some of its functions handle at most 64-element vectors; 32 lanes of bytes are 128), the
# same with AVX-only code generation and with Mesa 25 (docs/tests.md).
# Fails if lavapipe does not report 32-wide subgroups, so the coverage cannot vanish unseen.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LP_NATIVE_VECTOR_WIDTH=1024
if ! target/debug/zinc probe 2>&1 | grep -q "subgroup=32"; then
    echo "test-wide-subgroups.sh: lavapipe did not report 32-wide subgroups with LP_NATIVE_VECTOR_WIDTH=1024:" >&2
    target/debug/zinc probe >&2 || true
    exit 1
fi
ZINC_TEST_VULKAN_OPTIONS="int_dot = false" cargo test --locked -p zinc-tests --test vulkan -- --skip moe
