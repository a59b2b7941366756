#!/bin/bash
# Session 12, second round: the folded norm's prologue holding nothing across passes (clustered
# subgroup max/sum per block), the residual loaded before the dot product.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/fold2; mkdir -p $out
for v in base fold2 norope2 m_mean m_acc m_rope m_cluster; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
SECONDS=0
( for m in llama-7b qwen3-30b-a3b; do [ -f /tmp/zinc-$m-q4_0.gguf ] || $bin/zinc synth --preset $m --type q4_0 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-q4_0.gguf >/dev/null 2>&1; done
  [ -f /tmp/zinc-smollm2-q4_1.gguf ] || $bin/zinc synth --preset smollm2 --type q4_1 --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-smollm2-q4_1.gguf >/dev/null 2>&1 ) &
$bin/zinc probe > $out/probe.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv >> $out/probe.txt 2>&1
# The test binary loads the plugins beside it (its ../), so each build's copy runs its own.
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
    (/tmp/abl/fold2/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-fold2.txt
done
grep -E "^test |panicked" $out/parity-fold2.txt
echo "parity at $SECONDS s"
for v in m_mean m_acc m_rope m_cluster; do
  for t in norms_rope_and_elementwise_ops_match_cpu paged_attention_matches_cpu; do
    (/tmp/abl/$v/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) > $out/mutant-$v-$t.txt
    echo "$v $t: $(grep -E '^test |NMSE [0-9.e+-]+$' $out/mutant-$v-$t.txt | tail -2 | tr '\n' ' ')"
  done
done | tee $out/mutants.txt
wait
echo "mutants and synth at $SECONDS s"
for m in llama-7b qwen3-30b-a3b; do
  for v in base fold2 norope2 base fold2 norope2; do
    ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m-q4_0.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | tee -a $out/ab.txt
  done
done
for v in base fold2 norope2; do
  ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128" | sed "s/^/smollm2 $v: /" | tee -a $out/ab.txt
done
echo "ab at $SECONDS s"
ZINC_PLUGIN_PATH=/tmp/abl/fold2 ZINC_VULKAN_PROFILE=grid $bin/zinc bench -m /tmp/zinc-llama-7b-q4_0.gguf --backend vulkan -r 1 -p 8 -n 64 --batch 0 2>&1 | grep -v uploaded > $out/profile-decode-llama-7b-fold2.txt
head -20 $out/profile-decode-llama-7b-fold2.txt | tail -12
echo "all done at $SECONDS s"
