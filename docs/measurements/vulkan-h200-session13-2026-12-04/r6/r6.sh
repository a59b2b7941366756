#!/bin/bash
# Session 13, round 6: qwen3's per-head norms, RoPE and KV store as the one-row attention
# kernel's prologue (attention_prelude: the staged build) instead of rope_kv_store, against
# 888b4ce (mnorm).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r6; mkdir -p $out
for v in mnorm; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/pre && cp $bin/*.so /tmp/abl/pre/
SECONDS=0
( for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-pre.txt
done
echo "pre parity: $(grep -c '\.\.\. ok$' $out/parity-pre.txt) ok, $(grep -c 'FAILED$' $out/parity-pre.txt) failed at $SECONDS s"; grep -E "panicked" $out/parity-pre.txt | head -3
wait
echo "synth at $SECONDS s"
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$1 $2: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in mnorm pre; do ab qwen3-30b-a3b-q4_0 $v; done
done
for v in mnorm pre; do ab llama-7b-q4_0 $v; ab smollm2-q4_1 $v; done
echo "ab at $SECONDS s"
for m in qwen3-30b-a3b; do ty=q4_0
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
echo "all done at $SECONDS s"
