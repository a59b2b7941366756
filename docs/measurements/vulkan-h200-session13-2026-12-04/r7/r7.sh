#!/bin/bash
# Session 13, round 7: attention_prelude with every global read of its prologue issued
# together (pre2: the staged build; rope_kv_store stages the same way), against round 6's
# attention_prelude (pre) and 888b4ce (mnorm).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r7; mkdir -p $out
for v in mnorm pre; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/pre2 && cp $bin/*.so /tmp/abl/pre2/
SECONDS=0
( for m in qwen3-30b-a3b llama-7b; do ty=q4_0
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-pre2.txt
done
echo "pre2 parity: $(grep -c '\.\.\. ok$' $out/parity-pre2.txt) ok, $(grep -c 'FAILED$' $out/parity-pre2.txt) failed at $SECONDS s"; grep -E "panicked" $out/parity-pre2.txt | head -3
wait
echo "synth at $SECONDS s"
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$1 $2: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in mnorm pre pre2; do ab qwen3-30b-a3b-q4_0 $v; done
done
for v in mnorm pre2; do ab llama-7b-q4_0 $v; done
echo "all done at $SECONDS s"
