#!/bin/bash
# Session 11: pp512 again in the same grant (the final run's first prompt repetitions were slow).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/final-pp; mkdir -p $out
for m in llama-7b qwen3-30b-a3b; do
  [ -f /tmp/zinc-$m-q4_0.gguf ] || { echo "no file $m (fresh machine)"; exit 0; }
  $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 5 -p 512 -n 128 --batch 0 2>&1 | grep -v uploaded | tee $out/bench5-$m.txt | grep -E "pp512|tg128"
done
