#!/bin/bash
# Session 14, round 2: as round 1 with the prefetch also recorded after the Q/K/V-with-RoPE
# unit's attention and qwen3's prelude (round 1 hooked only the plain attention op, which
# neither model records at decode). Attention budgets only (SwiGLU prefetch lost in round 1).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/p2; mkdir -p $out
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do ty=q4_0
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  (ZINC_PF_ATTN_MB=24 ZINC_PF_PAST=1 timeout 120 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-pf.txt
done
echo "pf parity: $(grep -c '\.\.\. ok$' $out/parity-pf.txt) ok, $(grep -c 'FAILED$' $out/parity-pf.txt) failed at $SECONDS s"; grep -E "panicked" $out/parity-pf.txt | head -3
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; shift 2; env "$@" $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  ab llama-7b-q4_0 base X=1
  ab llama-7b-q4_0 a10 ZINC_PF_ATTN_MB=10
  ab llama-7b-q4_0 a18 ZINC_PF_ATTN_MB=18
  ab llama-7b-q4_0 a30 ZINC_PF_ATTN_MB=30
  ab qwen3-30b-a3b-q4_0 base X=1
  ab qwen3-30b-a3b-q4_0 a6 ZINC_PF_ATTN_MB=6
  ab qwen3-30b-a3b-q4_0 a12past ZINC_PF_ATTN_MB=12 ZINC_PF_PAST=1
  echo "round $round at $SECONDS s"
done
echo "all done at $SECONDS s"
