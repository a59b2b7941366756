#!/bin/bash
# Session 12, third round: Q/K/V with RoPE epilogue computing both rows of a pair in one loop
# (rope2) against two single-row loops (fold2); then -r 5 benchmarks of both builds.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r3; mkdir -p $out
for v in base fold2 rope2 m_rope2; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  [ -f /tmp/zinc-smollm2-q4_1.gguf ] || $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
{ $bin/zinc probe; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $out/probe.txt 2>&1
# The test binary loads the plugins beside it (its ../), so each build's copy runs its own.
for v in rope2 fold2; do
  for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
    (/tmp/abl/$v/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-$v.txt
  done
  echo "$v parity: $(grep -c '\.\.\. ok$' $out/parity-$v.txt) ok, $(grep -c 'FAILED$' $out/parity-$v.txt) failed"
done
(/tmp/abl/m_rope2/deps/vulkan-tests --exact paged_attention_matches_cpu --nocapture 2>&1 || true) > $out/mutant-m_rope2.txt
echo "m_rope2: $(grep -E '^test ' $out/mutant-m_rope2.txt)"
wait
echo "parity and synth at $SECONDS s"
for m in llama-7b smollm2; do
  ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  for v in fold2 rope2 fold2 rope2 fold2 rope2; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/$m $v: /" | tee -a $out/ab.txt
  done
done
echo "ab at $SECONDS s"
for v in rope2 fold2; do
  for m in llama-7b qwen3-30b-a3b smollm2; do
    ty=q4_0; [ $m = smollm2 ] && ty=q4_1
    echo "== $v $m" >> $out/bench5.txt
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded >> $out/bench5.txt
  done
done
grep -E "^== |pp512|tg128" $out/bench5.txt
echo "bench5 at $SECONDS s"
ZINC_PLUGIN_PATH=/tmp/abl/rope2 ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-llama-7b-rope2.txt
head -16 $out/profile-decode-llama-7b-rope2.txt | tail -8
echo "all done at $SECONDS s"
