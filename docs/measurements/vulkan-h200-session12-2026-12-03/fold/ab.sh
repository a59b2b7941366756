#!/bin/bash
# Session 12: the RMS norm folded into the shared-activation decode products (gate/up, and
# Q/K/V with the RoPE epilogue: matmul_q8_rope _sgx), the residual add into the product before it.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/fold; mkdir -p $out
for v in base fold norope m_mean m_acc m_rope; do mkdir -p /tmp/abl/$v && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/; done
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
$bin/zinc probe > $out/probe.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv >> $out/probe.txt 2>&1
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
    (ZINC_PLUGIN_PATH=/tmp/abl/fold $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-fold.txt
done
grep -E "^test |panicked" $out/parity-fold.txt
echo "parity at $SECONDS s"
for v in m_mean m_acc m_rope; do
  for t in norms_rope_and_elementwise_ops_match_cpu paged_attention_matches_cpu; do
    (ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) > $out/mutant-$v-$t.txt
    echo "$v $t: $(grep -E '^test |panicked at|NMSE [0-9.e-]+"?$' $out/mutant-$v-$t.txt | grep -E 'test |NMSE' | tail -2 | tr '\n' ' ')"
  done
done | tee $out/mutants.txt
wait
echo "mutants and synth at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in base fold norope base fold norope; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | tee -a $out/ab.txt
  done
done
for v in base fold norope; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/smollm2 $v: /" | tee -a $out/ab.txt
done
echo "ab at $SECONDS s"
ZINC_PLUGIN_PATH=/tmp/abl/fold ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-llama-7b-fold.txt
head -20 $out/profile-decode-llama-7b-fold.txt | tail -12
echo "all done at $SECONDS s"
