#!/bin/bash
# Session 16, round 8: the issue's benchmarks with the committed build and `zinc bench`'s
# warm-up of at least a second per test (the README's figures). No plugin changed since q6's
# parity run (69744a7's kernels); the parity tests run again.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q8; mkdir -p $out
SECONDS=0
for m in qwen3-30b-a3b:q4_0 llama-7b:q4_0 smollm2:q4_1; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
    (timeout 120 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-all.txt
done
grep -E "^test |panicked" $out/parity-all.txt
wait
echo "parity and synth at $SECONDS s"
for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
  echo "bench $m at $SECONDS s"
done
echo "all done at $SECONDS s"
