#!/bin/bash
# Session 11 A/B 2: two-level counters (new2), only the top-k tail (topk2), only the norm tails (norm2), 86554e9 (old).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/ab2; mkdir -p $out
for v in old new2 topk2 norm2; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
SECONDS=0
for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
echo "synth at $SECONDS s"
for t in the_norm_after_a_decode_product_takes_no_dispatch_of_its_own norms_rope_and_elementwise_ops_match_cpu moe_matches_cpu; do
    (ZINC_PLUGIN_PATH=/tmp/abl/new2 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-new2.txt
done
grep -E "^test |panicked" $out/parity-new2.txt
for m in qwen3-30b-a3b llama-7b; do
  vs="old new2 topk2 norm2 old new2 topk2 norm2"; [ $m = llama-7b ] && vs="old new2 old new2"
  for v in $vs; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|per step" | sed "s/^/$m $v: /" | tee -a $out/ab.txt
  done
done
echo "all done at $SECONDS s"
