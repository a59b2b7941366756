#!/bin/bash
# Session 12, last round: gate and up computed in pairs with SwiGLU as their epilogue, the down
# product quantizing the SwiGLU output in its prologue (swig), against fbc3ea6 (head).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/swiglu; mkdir -p $out
for v in head swig m_swig; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
SECONDS=0
( $bin/zinc synth --preset llama-7b --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-llama-7b-q4_0.gguf >/dev/null 2>&1
  $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  (/tmp/abl/swig/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-swig.txt
done
echo "swig parity: $(grep -c '\.\.\. ok$' $out/parity-swig.txt) ok, $(grep -c 'FAILED$' $out/parity-swig.txt) failed"
(/tmp/abl/m_swig/deps/vulkan-tests --exact norms_rope_and_elementwise_ops_match_cpu --nocapture 2>&1 || true) > $out/mutant-m_swig.txt
echo "m_swig: $(grep -E '^test |swiglu_then_down.*NMSE' $out/mutant-m_swig.txt | head -3 | tr '\n' ' ')"
wait
echo "parity and synth at $SECONDS s"
for m in llama-7b smollm2 llama-7b smollm2 llama-7b; do
  ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  for v in head swig; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | tee -a $out/ab.txt
  done
done
echo "all done at $SECONDS s"
