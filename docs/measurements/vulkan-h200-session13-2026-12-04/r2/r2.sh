#!/bin/bash
# Session 13, round 2: the shared-activation decode products (matmul_q8 `_sgx`) reading their
# first feature's first weight blocks before staging the activation row (pf), with four or
# seven blocks in flight per thread instead of two (u4, u7), both (pf4); head is the staged
# build (the same kernels restructured, no prefetch), att is b88f36d. (The variants were the
# restructured matmul_q8.comp with `#define PREFETCH 1` and/or `#define UNROLL 4u|7u` under
# SHARED_X; none was kept, see the README.)
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r2; mkdir -p $out
for v in att pf u4 pf4 u7; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/head && cp $bin/*.so /tmp/abl/head/
SECONDS=0
( for m in llama-7b qwen3-30b-a3b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-head.txt
  (/tmp/abl/pf4/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-pf4.txt
done
for v in head pf4; do echo "$v parity: $(grep -c '\.\.\. ok$' $out/parity-$v.txt) ok, $(grep -c 'FAILED$' $out/parity-$v.txt) failed at $SECONDS s"; grep -E "panicked" $out/parity-$v.txt | head -3; done
wait
echo "synth at $SECONDS s"
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$1 $2: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2; do
  for v in att head pf u4 pf4 u7; do ab llama-7b-q4_0 $v; done
done
echo "dense at $SECONDS s"
for v in head pf4 u4; do ab smollm2-q4_1 $v; done
for v in head pf4 u4; do ab qwen3-30b-a3b-q4_0 $v; done
echo "moe at $SECONDS s"
for v in head pf4; do
ZINC_PLUGIN_PATH=/tmp/abl/$v ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-$v-dense.txt
grep -A6 "vulkan profile" $out/profile-$v-dense.txt
done
echo "all done at $SECONDS s"
