#!/bin/bash
# Session 13, round 4: the RMS norm before each MoE block folded into the f32 router's decode
# product (mnorm: the staged build), against route (00248f2) and b88f36d (att2); then the
# issue's benchmarks with the staged build (`zinc bench -r 5 --batch 0`: pp512 and tg128).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r4; mkdir -p $out
for v in att2 route; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/mnorm && cp $bin/*.so /tmp/abl/mnorm/
SECONDS=0
( for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
$bin/zinc probe > $out/probe.txt 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> $out/probe.txt 2>&1
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-mnorm.txt
done
echo "mnorm parity: $(grep -c '\.\.\. ok$' $out/parity-mnorm.txt) ok, $(grep -c 'FAILED$' $out/parity-mnorm.txt) failed at $SECONDS s"; grep -E "panicked" $out/parity-mnorm.txt | head -3
wait
echo "synth at $SECONDS s"
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$1 $2: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2; do
  for v in att2 route mnorm; do ab qwen3-30b-a3b-q4_0 $v; done
done
echo "ab at $SECONDS s"
for m in llama-7b qwen3-30b-a3b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
echo "all done at $SECONDS s"
