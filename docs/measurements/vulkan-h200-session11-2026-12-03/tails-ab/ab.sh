#!/bin/bash
# Session 11 A/B: tails (this build) against 86554e9 (old), then parity on the H200.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/ab; mkdir -p $out
mkdir -p /tmp/abl/old && xz -dc .device/abl/old.so.xz > /tmp/abl/old/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/old/
( for m in llama-7b qwen3-30b-a3b; do $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done ) &
SECONDS=0
$bin/zinc probe > $out/probe.txt 2>&1; nvidia-smi --query-gpu=name,driver_version --format=csv >> $out/probe.txt 2>&1
for t in the_norm_after_a_decode_product_takes_no_dispatch_of_its_own norms_rope_and_elementwise_ops_match_cpu moe_matches_cpu; do
    ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-first.txt
done
echo "first parity took $SECONDS s"; grep -E "^test |panicked|NMSE" $out/parity-first.txt | head -40
wait
echo "synth done at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in old new old new; do
    if [ $v = old ]; then pp=/tmp/abl/old; else pp=$bin; fi
    ZINC_PLUGIN_PATH=$pp $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|per step" | sed "s/^/$m $v: /" | tee -a $out/ab.txt
  done
done
echo "ab done at $SECONDS s"
ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-qwen3-30b-a3b.txt
ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-llama-7b.txt
head -30 $out/profile-decode-qwen3-30b-a3b.txt
echo "all done at $SECONDS s"
