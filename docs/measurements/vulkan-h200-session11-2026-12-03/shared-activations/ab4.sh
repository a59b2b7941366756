#!/bin/bash
# Session 11: decode row kernel reading the activation row from shared memory (matmul_q8 _sgx,
# 512-wide workgroups, grid 264 or 528) against db318df (base).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/shared-activations; mkdir -p $out
for v in base sx264 sx528; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
for t in matmul_every_type_matches_cpu wide_decode_products_cover_every_feature matmul_plain_kernels_match_cpu_where_integer_dot_exists norms_rope_and_elementwise_ops_match_cpu moe_matches_cpu paged_attention_matches_cpu; do
    (ZINC_PLUGIN_PATH=/tmp/abl/sx264 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-sx264.txt
done
grep -E "^test |panicked" $out/parity-sx264.txt
wait
echo "parity and synth at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in base sx264 sx528 base sx264 sx528; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/$m $v: /" | tee -a $out/ab.txt
  done
done
for v in base sx264; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/smollm2 $v: /" | tee -a $out/ab.txt
done
ZINC_PLUGIN_PATH=/tmp/abl/sx264 ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-llama-7b-sx264.txt
head -16 $out/profile-decode-llama-7b-sx264.txt | tail -8
echo "all done at $SECONDS s"
