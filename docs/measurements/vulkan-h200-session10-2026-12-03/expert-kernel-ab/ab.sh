#!/bin/bash
# Round 2 A/B on the H200: expert kernel features per subgroup (2/4/8), f32 router 64 threads per feature.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/ab; mkdir -p $out
for v in old fps2 fps8 rt64; do mkdir -p /tmp/abl/$v; xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so; done
mkdir -p /tmp/abl/base; cp $bin/libzinc_backend_vulkan.so /tmp/abl/base/
( $bin/zinc synth --preset qwen3-30b-a3b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-qwen3-30b-a3b-q4_0.gguf >/dev/null 2>&1;
  $bin/zinc synth --preset llama-7b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-llama-7b-q4_0.gguf >/dev/null 2>&1 ) &
SECONDS=0
for t in matmul_every_type_matches_cpu moe_matches_cpu wide_decode_products_cover_every_feature paged_attention_matches_cpu; do
    ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity.txt
done
echo "parity took $SECONDS s"; grep -E "^test |panicked" $out/parity.txt
wait
m=qwen3-30b-a3b
for v in old base fps2 fps8 rt64 base fps2 old; do
    echo "== $m $v" >> $out/bench.txt
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -p 8 -n 128 -r 2 --batch 0 2>&1 | grep -E "tg128|pp8" >> $out/bench.txt
    echo "$m $v at $SECONDS s"; tail -1 $out/bench.txt
done
for v in base rt64; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-$m-$v.txt
done
echo "== llama-7b base -r 3" >> $out/bench.txt
ZINC_PLUGIN_PATH=/tmp/abl/base $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -p 8 -n 128 -r 3 --batch 0 2>&1 | grep -E "tg128|pp8" >> $out/bench.txt
tail -1 $out/bench.txt
echo "all done at $SECONDS s"
