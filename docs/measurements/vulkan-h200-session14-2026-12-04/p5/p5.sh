#!/bin/bash
# Session 14, round 5: head = 45a9d62 (the SwiGLU epilogue, staged); quad = the epilogue's
# gate and up rows of a feature pair in one loop (four rows' loads in flight, `quad_rows`)
# instead of two pair loops. Then the benchmarks with head.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/p5; mkdir -p $out
for v in quad; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/head && cp $bin/*.so /tmp/abl/head/
SECONDS=0
( for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
(timeout 100 /tmp/abl/quad/deps/vulkan-tests --exact norms_rope_and_elementwise_ops_match_cpu --nocapture 2>&1 || true) > $out/parity-quad.txt
echo "quad: $(grep -E '^test ' $out/parity-quad.txt)"; grep -E "gate_and_up" $out/parity-quad.txt
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  ab llama-7b-q4_0 head; ab llama-7b-q4_0 quad
done
ab smollm2-q4_1 head; ab smollm2-q4_1 quad
echo "ab at $SECONDS s"
for m in llama-7b qwen3-30b-a3b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
$bin/zinc probe > $out/probe.txt 2>&1 || true
echo "all done at $SECONDS s"
