#!/bin/bash
# Session 13, round 8: the Q/K/V products' RoPE / KV-store epilogue reads (position,
# frequency, KV page) issued before the shared-activation kernel stages its row (ropepf: the
# staged build), against 381eb25 (head). Dense only; the attention op test as parity.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r8; mkdir -p $out
mkdir -p /tmp/abl/head && xz -dc .device/abl/head.so.xz > /tmp/abl/head/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/head/
mkdir -p /tmp/abl/ropepf && cp $bin/*.so /tmp/abl/ropepf/
SECONDS=0
$bin/zinc synth --preset llama-7b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-llama-7b-q4_0.gguf >/dev/null 2>&1 &
($bin/deps/vulkan-tests --exact paged_attention_matches_cpu --nocapture 2>&1 || true) > $out/parity-ropepf.txt
echo "ropepf attention parity: $(grep -E '^test ' $out/parity-ropepf.txt) at $SECONDS s"
wait
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/$1 $2: /" | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in head ropepf; do ab llama-7b-q4_0 $v; done
done
echo "all done at $SECONDS s"
