#!/bin/bash
# Session 15, round 2: the fence_wait module (poll after sleeping a share of the shape's last
# device time, 75 % in this build) with temporary env overrides read in fence_wait::wait, not
# committed: ZINC_VK_FENCE=block, ZINC_VK_SLEEP_PCT=0/75/90.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q2; mkdir -p $out
SECONDS=0
for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
(for t in one_submission_per_step_and_the_device_says_what_it_is synthetic_qwen3_and_qwen3moe_greedy_generation_agrees_with_cpu_up_to_near_ties; do timeout 200 $bin/deps/vulkan-tests --exact $t --nocapture 2>&1; done) > $out/parity-poll.txt
grep -E "^test |identical|panicked" $out/parity-poll.txt
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; env $3 $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches|tg128 per token" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/counters.*per step: //;s/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2; do
  for m in llama-7b-q4_0 qwen3-30b-a3b-q4_0 smollm2-q4_1; do
    ab $m block ZINC_VK_FENCE=block; ab $m p0 ZINC_VK_SLEEP_PCT=0; ab $m p75 ZINC_VK_SLEEP_PCT=75; ab $m p90 ZINC_VK_SLEEP_PCT=90
  done
done
$bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 8 --batch 0 --json 2>&1 | grep -i fence-wait
echo "all done at $SECONDS s"
