#!/bin/bash
# Session 11, the cost of one barrier-separated dispatch in the unprofiled decode stream: db318df
# (base) against builds of it that record one (null1) or three (null3) extra one-workgroup
# dispatches, each after a barrier, after every fused residual-add-and-norm (two per layer but
# the first layer's one).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/null-dispatches; mkdir -p $out
for v in base null1 null3; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
SECONDS=0
for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
echo "synth at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in base null1 null3 base null1 null3; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|per step" | sed "s/^/$m $v: /" | tee -a $out/ab.txt
  done
done
echo "all done at $SECONDS s"
