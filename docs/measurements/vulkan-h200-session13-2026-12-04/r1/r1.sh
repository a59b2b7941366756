#!/bin/bash
# Session 13, round 1: attention's softmax reductions as subgroup operations with its K/V reads
# issued early (att), gate/up with SwiGLU as their epilogue (swig), both (the staged build),
# against fe9e5d6 (base).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r1; mkdir -p $out
for v in base att swig; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/both && cp $bin/*.so /tmp/abl/both/
SECONDS=0
( for m in llama-7b qwen3-30b-a3b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
$bin/zinc probe > $out/probe.txt 2>&1
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-both.txt
done
echo "both parity: $(grep -c '\.\.\. ok$' $out/parity-both.txt) ok, $(grep -c 'FAILED$' $out/parity-both.txt) failed at $SECONDS s"
grep -E "panicked|FAILED" $out/parity-both.txt | head
wait
echo "synth at $SECONDS s"
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$1 $2: /;s/$/\n/" | tee -a $out/ab.txt; }
for round in 1 2; do
  for v in base att swig both; do ab llama-7b-q4_0 $v; done
  for v in base both; do ab smollm2-q4_1 $v; done
done
echo "dense at $SECONDS s"
for v in base att both; do ab qwen3-30b-a3b-q4_0 $v; done
echo "moe at $SECONDS s"
ZINC_PLUGIN_PATH=/tmp/abl/both ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-both-dense.txt
ZINC_PLUGIN_PATH=/tmp/abl/base ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-base-dense.txt
ZINC_PLUGIN_PATH=/tmp/abl/both ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-both-moe.txt
grep -A12 "vulkan profile" $out/profile-both-dense.txt $out/profile-base-dense.txt
echo "all done at $SECONDS s"
