#!/bin/bash
# Session 14, round 4: the SwiGLU epilogue now also where the SwiGLU writes in place of gate
# (as the model programs do; round 3's build folded only a separate output, so its dense and
# SmolLM2 rows compared two identical recordings). glu: the fold; off: the same build with
# ZINC_GLU_MIN_BLOCKS past every width (no fold). Then the benchmarks with the fold.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/p4; mkdir -p $out
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
SECONDS=0
( for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
  (timeout 150 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-glu.txt
done
echo "glu parity: $(grep -c '\.\.\. ok$' $out/parity-glu.txt) ok, $(grep -c 'FAILED$' $out/parity-glu.txt) failed at $SECONDS s"; grep -E "panicked|greedy steps|gate_and_up" $out/parity-glu.txt | head -8
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; shift 2; env "$@" $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  ab llama-7b-q4_0 off ZINC_GLU_MIN_BLOCKS=100000
  ab llama-7b-q4_0 glu X=1
  ab smollm2-q4_1 off ZINC_GLU_MIN_BLOCKS=100000
  ab smollm2-q4_1 glu X=1
  echo "round $round at $SECONDS s"
done
for m in llama-7b qwen3-30b-a3b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
echo "bench at $SECONDS s"
ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-glu.txt
grep -A8 "vulkan profile" $out/profile-decode-glu.txt
echo "all done at $SECONDS s"
