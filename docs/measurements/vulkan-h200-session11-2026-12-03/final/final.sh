#!/bin/bash
# Session 11 final: the committed build (shared-activation decode kernel), parity on the H200,
# then `zinc bench -r 5 --batch 0` for the dense and 30B-A3B files, SmolLM2 with -r 2.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/final; mkdir -p $out
( for m in llama-7b qwen3-30b-a3b; do $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
SECONDS=0
$bin/zinc probe > $out/probe.txt 2>&1; nvidia-smi --query-gpu=name,driver_version --format=csv >> $out/probe.txt 2>&1
for t in wide_decode_products_cover_every_feature matmul_every_type_matches_cpu norms_rope_and_elementwise_ops_match_cpu moe_matches_cpu paged_attention_matches_cpu; do
    ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity.txt
done
grep -E "^test |panicked" $out/parity.txt
wait
echo "parity and synth at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 5 --batch 0 2>&1 | tee $out/bench5-$m.txt | grep -E "pp512|tg128"
  echo "$m at $SECONDS s"
done
$bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 2 --batch 0 2>&1 | tee $out/bench-smollm2.txt | grep -E "pp512|tg128"
echo "all done at $SECONDS s"
