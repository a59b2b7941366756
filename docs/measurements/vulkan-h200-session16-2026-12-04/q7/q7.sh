#!/bin/bash
# Session 16, round 7: why the first pp512 of a large file in a fresh process is sometimes
# slow. The SM and memory clocks sampled every 50 ms (nvidia-smi) while `zinc bench -r 5
# --batch 0` runs on the 30B-A3B with the staged build (69744a7), and the wall clock at each
# phase.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q7; mkdir -p $out
SECONDS=0
which nvidia-smi > $out/smi.txt 2>&1 || ls /usr/local/nvidia/bin >> $out/smi.txt 2>&1
export PATH=$PATH:/usr/local/nvidia/bin
$bin/zinc synth --preset qwen3-30b-a3b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-q.gguf >/dev/null 2>&1
echo "synth at $SECONDS s"
for run in 1 2; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,utilization.gpu --format=csv -lms 50 > $out/clocks-$run.csv 2>&1 &
  smi=$!
  date +%T.%N > $out/bench-$run.txt
  $bin/zinc bench -m /tmp/zinc-q.gguf --backend vulkan -r 5 --batch 0 2>&1 | while IFS= read -r l; do echo "$(date +%T.%N) $l"; done >> $out/bench-$run.txt
  kill $smi
  grep -E "pp512|tg128" $out/bench-$run.txt
done
echo "all done at $SECONDS s"
