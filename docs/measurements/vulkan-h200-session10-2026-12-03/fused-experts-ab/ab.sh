#!/bin/bash
# A/B on the H200: fused expert kernels (SwiGLU epilogue, combined down) against f907103; combined-down features per subgroup 4 / 2 / 1.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/ab; mkdir -p $out
for v in prev c2 c1; do mkdir -p /tmp/abl/$v; xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so; done
mkdir -p /tmp/abl/new; cp $bin/libzinc_backend_vulkan.so /tmp/abl/new/
$bin/zinc synth --preset qwen3-30b-a3b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-qwen3-30b-a3b-q4_0.gguf >/dev/null 2>&1 &
SECONDS=0
for t in moe_matches_cpu matmul_every_type_matches_cpu wide_decode_products_cover_every_feature; do
    ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity.txt
done
grep -E "^test |panicked|moe" $out/parity.txt
wait
m=qwen3-30b-a3b
for v in prev new c2 c1 prev new c2 c1; do
    echo "== $m $v" >> $out/bench.txt
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -p 8 -n 128 -r 2 --batch 0 2>&1 | grep -E "tg128" >> $out/bench.txt
    echo "$m $v at $SECONDS s"; tail -1 $out/bench.txt
done
for v in new; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-$m-$v.txt
  head -30 $out/profile-decode-$m-$v.txt
done
echo "all done at $SECONDS s"
