#!/bin/bash
# Session 16, round 1: decode attention doing the head norms, RoPE and KV store itself
# (attention_prelude_sg) against the separate rope_kv_store dispatch. One build; the staged
# build's ZINC_AB_NO_PRELUDE switch (not committed) keeps the separate dispatch. Parity of
# every op test with the prelude, then A/B on the 30B-A3B, then the benchmarks.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q1; mkdir -p $out
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
ab() { m=$1; v=$2; if [ $v = separate ]; then export ZINC_AB_NO_PRELUDE=1; else unset ZINC_AB_NO_PRELUDE; fi
  $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|tg128 per token" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in separate prelude; do ab qwen3-30b-a3b-q4_0 $v; done
done
unset ZINC_AB_NO_PRELUDE
echo "ab at $SECONDS s"
for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
  echo "bench $m at $SECONDS s"
done
echo "all done at $SECONDS s"
