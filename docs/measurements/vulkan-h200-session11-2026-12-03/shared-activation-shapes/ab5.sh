#!/bin/bash
# Session 11: shapes of the shared-activation decode kernel: sx264 (512-wide workgroups, grid
# 264, two blocks in flight per thread), sxu4 (the same, four in flight), sx1024 (1,024-wide,
# grid 132), sx256 (256-wide, grid 528), against db318df (base).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/shared-activation-shapes; mkdir -p $out
for v in base sx264 sxu4 sx1024 sx256; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
SECONDS=0
for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
echo "synth at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in base sx264 sxu4 sx1024 sx256 sx264 sxu4 sx1024 sx256 base; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/$m $v: /" | tee -a $out/ab.txt
  done
done
echo "all done at $SECONDS s"
