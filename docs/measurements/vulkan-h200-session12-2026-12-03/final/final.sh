#!/bin/bash
# Session 12, final round: the MoE block's combined down products adding to the residual
# (moefold, the committed tree) against rope2; parity of moefold; -r 5 benchmarks of both,
# each large file twice (a second process for the prompt figures).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/final; mkdir -p $out
for v in rope2 moefold; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  [ -f /tmp/zinc-smollm2-q4_1.gguf ] || $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
{ $bin/zinc probe; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $out/probe.txt 2>&1
# The test binary loads the plugins beside it (its ../), so this copy runs moefold's.
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  (/tmp/abl/moefold/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-moefold.txt
done
echo "moefold parity: $(grep -c '\.\.\. ok$' $out/parity-moefold.txt) ok, $(grep -c 'FAILED$' $out/parity-moefold.txt) failed"
wait
echo "parity and synth at $SECONDS s"
for v in rope2 moefold rope2 moefold rope2 moefold; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/qwen3-30b-a3b $v: /;s/$/\n/" | tee -a $out/ab.txt
done
echo "ab at $SECONDS s"
# rope2 differs from moefold only in the MoE block: the dense and SmolLM2 files run the same code.
for v in moefold rope2; do
  ms="llama-7b qwen3-30b-a3b smollm2 llama-7b qwen3-30b-a3b"; [ $v = rope2 ] && ms="qwen3-30b-a3b qwen3-30b-a3b"
  for m in $ms; do
    ty=q4_0; [ $m = smollm2 ] && ty=q4_1
    echo "== $v $m" >> $out/bench5.txt
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded >> $out/bench5.txt
  done
done
grep -E "^== |pp512|tg128" $out/bench5.txt
echo "bench5 at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  echo "== moefold $m" >> $out/profile.txt
  ZINC_PLUGIN_PATH=/tmp/abl/moefold ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded >> $out/profile.txt
done
grep -E "^== |sgx|combine|rms_norm 1x|attention 32x1x1|swiglu" $out/profile.txt
echo "all done at $SECONDS s"
