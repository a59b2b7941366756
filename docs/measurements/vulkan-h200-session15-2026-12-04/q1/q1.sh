#!/bin/bash
# Session 15, round 1: head = fcbb317 + ZINC_VK_SPIN_US (poll the step's fence for up to N µs
# before blocking in vkWaitForFences; a temporary switch read in Context::submit_and_wait,
# not committed). Per-token wall vs device time, spin 0 vs spin 20000.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q1; mkdir -p $out
SECONDS=0
for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done; wait
echo "synth at $SECONDS s"
ab() { m=$1; s=$2; ZINC_VK_SPIN_US=$s $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches|per token" | tr '\n' ' ' | sed "s/^/$m spin$s: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2; do
  for m in llama-7b-q4_0 qwen3-30b-a3b-q4_0 smollm2-q4_1; do ab $m 0; ab $m 20000; done
done
echo "ab at $SECONDS s"
ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-moe.txt
echo "all done at $SECONDS s"
