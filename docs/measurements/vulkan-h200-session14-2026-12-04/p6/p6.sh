#!/bin/bash
# Session 14, round 6: the plain shared-activation decode products' grid (Q/K/V with RoPE, O,
# down, logits; not the SwiGLU epilogue's) capped at 132 (g132) or 200 (g200) workgroups of
# 512 instead of 264 (head = 45a9d62): does launching fewer workgroups, each subgroup taking
# more rows, pay where the products are latency-bound?
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/p6; mkdir -p $out
for v in g132 g200; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
mkdir -p /tmp/abl/head && cp $bin/*.so /tmp/abl/head/
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do
  [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done ) &
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/$m $v: /" | tee -a $out/ab.txt; }
for round in 1 2 3; do for v in head g132 g200; do ab llama-7b-q4_0 $v; done; echo "round $round at $SECONDS s"; done
for round in 1 2; do for v in head g132 g200; do ab qwen3-30b-a3b-q4_0 $v; done; done
echo "all done at $SECONDS s"
