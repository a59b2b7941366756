#!/bin/bash
# Session 13, round 5: where a decode token's time goes with the final build (888b4ce), per
# kernel (ZINC_VULKAN_PROFILE=grid, `-p 8 -n 64`): the dense 7.4B and 30B-A3B files.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r5; mkdir -p $out
SECONDS=0
for m in llama-7b qwen3-30b-a3b; do
  $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1
  ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-$m.txt
  $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" >> $out/profile-decode-$m.txt
  grep -A14 "vulkan profile" $out/profile-decode-$m.txt; tail -1 $out/profile-decode-$m.txt
done
echo "all done at $SECONDS s"
