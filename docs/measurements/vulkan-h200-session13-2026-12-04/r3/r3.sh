#!/bin/bash
# Session 13, round 3: the MoE router's top-k done by the experts' gate/up kernel (matvec_q8
# `_swiglu`) as its prologue instead of a dispatch of its own (route: the staged build),
# against b88f36d (att2); m_route: every slot takes the expert of rank 0 (a mutant).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/r3; mkdir -p $out
for v in att2 m_route; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/route && cp $bin/*.so /tmp/abl/route/
SECONDS=0
( for m in qwen3-30b-a3b llama-7b; do ty=q4_0
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  ($bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-route.txt
done
echo "route parity: $(grep -c '\.\.\. ok$' $out/parity-route.txt) ok, $(grep -c 'FAILED$' $out/parity-route.txt) failed at $SECONDS s"; grep -E "panicked" $out/parity-route.txt | head -3
(/tmp/abl/m_route/deps/vulkan-tests --exact moe_matches_cpu --nocapture 2>&1 || true) > $out/mutant-m_route.txt
echo "m_route: $(grep -E '^test |NMSE' $out/mutant-m_route.txt | head -3 | tr '\n' ' ')"
wait
echo "synth at $SECONDS s"
ab() { ZINC_PLUGIN_PATH=/tmp/abl/$2 $bin/zinc bench -m /tmp/zinc-$1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$1 $2: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in att2 route; do ab qwen3-30b-a3b-q4_0 $v; done
done
ab llama-7b-q4_0 route
echo "all done at $SECONDS s"
