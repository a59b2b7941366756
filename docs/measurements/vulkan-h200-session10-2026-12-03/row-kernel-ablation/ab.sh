#!/bin/bash
# Ablation of the decode row kernel on the H200: no unpack/dot arithmetic (noalu), no activation loads (noact).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/ab; mkdir -p $out
for v in noalu noact; do mkdir -p /tmp/abl/$v; xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so; done
mkdir -p /tmp/abl/base; cp $bin/libzinc_backend_vulkan.so /tmp/abl/base/
$bin/zinc synth --preset llama-7b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-llama-7b-q4_0.gguf >/dev/null 2>&1
SECONDS=0
m=llama-7b
for v in base noalu noact base noalu noact; do
    echo "== $m $v" >> $out/bench.txt
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -p 8 -n 128 -r 2 --batch 0 2>&1 | grep -E "tg128" >> $out/bench.txt
    echo "$m $v at $SECONDS s"; tail -1 $out/bench.txt
done
for v in base noalu noact; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-$m-$v.txt
  grep -E "matmul_q8" $out/profile-decode-$m-$v.txt
done
echo "all done at $SECONDS s"
