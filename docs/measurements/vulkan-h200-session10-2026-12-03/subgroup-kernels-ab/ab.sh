#!/bin/bash
# A/B of decode kernels on the H200. Run from the repo root on the device.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/ab; mkdir -p $out
for v in old fps2 fps8; do mkdir -p /tmp/abl/$v; xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so; done
mkdir -p /tmp/abl/fps4; cp $bin/libzinc_backend_vulkan.so /tmp/abl/fps4/
( $bin/zinc synth --preset llama-7b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-llama-7b-q4_0.gguf >/dev/null 2>&1;
  $bin/zinc synth --preset qwen3-30b-a3b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-qwen3-30b-a3b-q4_0.gguf >/dev/null 2>&1 ) &
$bin/zinc probe > $out/probe.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv >> $out/probe.txt 2>&1
SECONDS=0
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
    ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity.txt
done
echo "parity took $SECONDS s"; grep -E "^test |panicked" $out/parity.txt
wait
echo "synth done at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in old fps4 fps2 fps8 old fps4; do
    echo "== $m $v" >> $out/bench.txt
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -p 8 -n 128 -r 2 --batch 0 2>&1 | grep -E "tg128|pp8" >> $out/bench.txt
    echo "$m $v at $SECONDS s"; tail -2 $out/bench.txt
  done
done
for m in llama-7b qwen3-30b-a3b; do
  ZINC_PLUGIN_PATH=/tmp/abl/fps4 ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-$m.txt
done
echo "all done at $SECONDS s"
