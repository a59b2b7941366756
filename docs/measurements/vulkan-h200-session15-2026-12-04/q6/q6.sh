#!/bin/bash
# Session 15, round 6 (combine-slot-groups.patch beside it, on cb0878a): the experts' combined down products taking their slots eight (comb8,
# staged in .device/bin) or four (comb4) at a time with every read of a group issued before
# its first multiply, against head = cb0878a. Parity of every op test with comb8, then the
# issue's benchmarks with it.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q6; mkdir -p $out
SECONDS=0
for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
for v in head comb4; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
mkdir -p /tmp/abl/comb8 && cp $bin/*.so /tmp/abl/comb8/
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
    (timeout 120 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-comb8.txt
done
grep -E "^test |panicked" $out/parity-comb8.txt
wait
echo "parity and synth at $SECONDS s"
ab() { m=$1; v=$2; ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|tg128 per token" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2; do
  for v in head comb8 comb4; do ab qwen3-30b-a3b-q4_0 $v; done
done
echo "ab at $SECONDS s"
for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
$bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 1 -p 8 -n 8 --batch 0 --json 2>&1 | grep -E "fence|\"name\"|driver" > $out/features.txt
$bin/zinc probe > $out/probe.txt 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> $out/probe.txt 2>&1 || true
echo "all done at $SECONDS s"
