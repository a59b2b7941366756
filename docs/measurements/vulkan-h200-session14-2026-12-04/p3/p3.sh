#!/bin/bash
# Session 14, round 3: gate and up with the SwiGLU and its 8-bit copy as their epilogue
# (matmul_q8 `_glu_sgx`; glu: the staged build) against the same build with the fold off
# (noglu); m_glu: a mutant whose blocks' d·Σq is wrong. ZINC_SGX_GROUPS caps the
# shared-activation grid (264 today), balanced so every subgroup / workgroup takes the same rounds.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/p3; mkdir -p $out
for v in noglu m_glu; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/glu && cp $bin/*.so /tmp/abl/glu/
# The synthetic greedy test takes its tokenizer from the default model's place.
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
SECONDS=0
( for m in llama-7b:q4_0 smollm2:q4_1; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1; done ) &
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
  (timeout 150 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-glu.txt
done
echo "glu parity: $(grep -c '\.\.\. ok$' $out/parity-glu.txt) ok, $(grep -c 'FAILED$' $out/parity-glu.txt) failed at $SECONDS s"; grep -E "panicked|NMSE|greedy steps" $out/parity-glu.txt | head -8
(timeout 100 /tmp/abl/m_glu/deps/vulkan-tests --exact norms_rope_and_elementwise_ops_match_cpu --nocapture 2>&1 || true) > $out/mutant-m_glu.txt
echo "m_glu: $(grep -E '^test |panicked' $out/mutant-m_glu.txt | head -3 | tr '\n' ' ')"; grep -E "NMSE" $out/mutant-m_glu.txt | head -2
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; shift 2; env ZINC_PLUGIN_PATH=/tmp/abl/${v%_*} "$@" $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/counters.*per step: //' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  ab llama-7b-q4_0 noglu X=1
  ab llama-7b-q4_0 glu X=1
  ab llama-7b-q4_0 noglu_300 ZINC_SGX_GROUPS=300
  ab llama-7b-q4_0 glu_300 ZINC_SGX_GROUPS=300
  ab llama-7b-q4_0 glu_448 ZINC_SGX_GROUPS=448
  echo "round $round at $SECONDS s"
done
for round in 1 2; do ab smollm2-q4_1 noglu X=1; ab smollm2-q4_1 glu X=1; done
ZINC_PLUGIN_PATH=/tmp/abl/glu ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-glu.txt
grep -A10 "vulkan profile" $out/profile-decode-glu.txt
echo "all done at $SECONDS s"
