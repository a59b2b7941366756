#!/bin/bash
# Session 16, round 5. v23 = dcbc23c; w2 = + one-row attention in 128-invocation workgroups
# and 128-key tiles; nt256 = the same with 256 (staged in .device/bin). Parity of every op
# test with nt256, A/B on the 30B-A3B and the dense 7.4B, then the benchmarks with
# nt256 and the 30B-A3B's with w2, and a decode profile with nt256.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q5; mkdir -p $out
SECONDS=0
for m in qwen3-30b-a3b:q4_0 llama-7b:q4_0 smollm2:q4_1; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
for v in v23 w2; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
mkdir -p /tmp/abl/nt256 && cp $bin/*.so /tmp/abl/nt256/
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
    (timeout 120 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-all.txt
done
grep -E "^test |panicked" $out/parity-all.txt
wait
echo "parity and synth at $SECONDS s"
ab() { m=$1; v=$2
  ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|tg128 per token" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in v23 w2 nt256; do ab qwen3-30b-a3b-q4_0 $v; done
done
for round in 1 2; do
  for v in v23 w2 nt256; do ab llama-7b-q4_0 $v; done
done
echo "ab at $SECONDS s"
for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
  echo "bench $m at $SECONDS s"
done
ZINC_PLUGIN_PATH=/tmp/abl/w2 $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-w2-qwen3-30b-a3b.txt
grep -E "pp512|tg128|device" $out/bench5-w2-qwen3-30b-a3b.txt
ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-qwen3-30b-a3b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-qwen3-30b-a3b.txt
echo "all done at $SECONDS s"
