#!/usr/bin/env bash
# Measures zinc's Vulkan backend on a GPU machine that has no Rust toolchain: the issue's three
# synthetic shapes (SmolLM2 in Q4_1, a dense 7.4B llama in Q4_0, a Qwen3-30B-A3B MoE in
# Q4_0), pp512 and tg128 with `zinc bench`, after the op-by-op parity tests against the CPU
# tier on that GPU. Build here first:
#   cargo build --release -p zinc -p zinc-backend-cpu -p zinc-backend-vulkan
#   cargo test -p zinc-tests --test vulkan --no-run
#   bash scripts/bench/vulkan_gpu.sh --stage      # copies binaries to .device/ (git-ignored)
# then on the GPU machine, from the repository root (the loader .debs in .gl/ as the device
# README describes):
#   bash scripts/bench/vulkan_gpu.sh [OUTDIR] [MODELS...]   # MODELS: smollm2 llama-7b qwen3-30b-a3b
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/.device/bin"
if [ "${1:-}" = "--stage" ]; then
    rm -rf "$root/.device" && mkdir -p "$bin/deps"
    for f in zinc libzinc_backend_cpu.so libzinc_backend_vulkan.so; do
        strip -o "$bin/$f" "$root/target/release/$f"
    done
    t=$(ls -t "$root"/target/debug/deps/vulkan-* | grep -v '\.d$' | head -1)
    strip -o "$bin/deps/vulkan-tests" "$t"
    # A small file that carries the default model's tokenizer, for `zinc synth --tokenizer`.
    "$root/target/release/zinc" synth --tokenizer-only -o "$root/.device/tokenizer.gguf" >/dev/null
    du -sh "$root/.device"
    exit 0
fi
profile=0
if [ "${1:-}" = "--profile" ]; then profile=1; shift; fi
out=${1:-/tmp/zinc-bench}
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(smollm2 llama-7b qwen3-30b-a3b)
mkdir -p "$out"
. "$root/scripts/bench/gpu_env.sh"
cd "$root"
if [ $profile = 1 ]; then
    # Where the time goes, per kernel: decode (short prompt, 64 tokens) and a 512-token prefill.
    for m in "${models[@]}"; do
        ty=q4_0; [ "$m" = smollm2 ] && ty=q4_1
        f="/tmp/zinc-$m-$ty.gguf"
        [ -f "$f" ] || "$bin/zinc" synth --preset "$m" --type "$ty" --seed 1 --tokenizer "$root/.device/tokenizer.gguf" -o "$f" >/dev/null 2>&1
        echo "== $m decode"
        ZINC_VULKAN_PROFILE=grid "$bin/zinc" bench -m "$f" --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded | tee "$out/profile-decode-$m.txt" | head -30
        echo "== $m prefill"
        ZINC_VULKAN_PROFILE=grid "$bin/zinc" bench -m "$f" --backend vulkan -r 1 -p 512 -n 1 --batch 0 2>&1 | grep -v uploaded | tee "$out/profile-prefill-$m.txt" | grep -A24 "vulkan profile"
    done
    exit 0
fi
"$bin/zinc" probe 2>&1 | tee "$out/probe.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$out/probe.txt" || true
echo "== op parity on this GPU (integer-dot and plain kernels)"
# One process per test: NVIDIA's driver was seen to refuse a new instance in a process
# that had already created and destroyed devices ("Unable to find a Vulkan driver").
# The test binary loads the plugins in the directory above its own (.device/bin here), not
# ZINC_PLUGIN_PATH's: to test another build, run a copy of it from NAME/deps/ beside that
# build's plugins in NAME/.
for t in $("$bin/deps/vulkan-tests" --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
    ("$bin/deps/vulkan-tests" --exact "$t" --nocapture 2>&1 || true) >>"$out/parity.txt"
done
grep -E "^test |test result|NMSE|panicked" "$out/parity.txt" || true
for m in "${models[@]}"; do
    case $m in
        smollm2) ty=q4_1 ;;
        *) ty=q4_0 ;;
    esac
    f="/tmp/zinc-$m-$ty.gguf"
    [ -f "$f" ] || "$bin/zinc" synth --preset "$m" --type "$ty" --seed 1 --tokenizer "$root/.device/tokenizer.gguf" -o "$f" >/dev/null
    echo "== $m ($ty)"
    "$bin/zinc" bench -m "$f" --backend vulkan -r 2 --batch 0 2>&1 | tee "$out/bench-$m.txt"
done
