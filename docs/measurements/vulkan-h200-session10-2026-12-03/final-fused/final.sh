#!/bin/bash
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/final; mkdir -p $out
( for m in llama-7b qwen3-30b-a3b; do $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
SECONDS=0
$bin/zinc probe > $out/probe.txt 2>&1; nvidia-smi --query-gpu=name,driver_version --format=csv >> $out/probe.txt 2>&1
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
    ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity.txt
done
echo "parity took $SECONDS s"; grep -E "^test |panicked" $out/parity.txt
wait
for m in llama-7b qwen3-30b-a3b; do
  $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 5 --batch 0 2>&1 | tee $out/bench5-$m.txt | grep -E "pp512|tg128"
  echo "$m at $SECONDS s"
done
$bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 2 --batch 0 2>&1 | tee $out/bench-smollm2.txt | grep -E "pp512|tg128"
ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-qwen3-30b-a3b.txt
echo "all done at $SECONDS s"
