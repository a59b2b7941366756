#!/bin/bash
# Session 15, round 7: qwen3's head norms, RoPE and KV store as the epilogue of its Q, K and
# V products at decode (matmul_q8 `_heads_sgx`, staged in .device/bin = heads) against head =
# cb0878a; mut = heads with K and V's f16 halves packed in swapped order (must fail the
# attention test). Parity of every op test with heads, then the 30B-A3B A/B, then the
# issue's benchmarks with heads.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q7; mkdir -p $out
SECONDS=0
for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
for v in head mut; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
mkdir -p /tmp/abl/heads && cp $bin/*.so /tmp/abl/heads/
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
    (timeout 120 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-heads.txt
done
grep -E "^test |panicked" $out/parity-heads.txt
grep -E "head_dim 128" $out/parity-heads.txt | head -12
(timeout 120 /tmp/abl/mut/deps/vulkan-tests --exact paged_attention_matches_cpu --nocapture 2>&1 || true) > $out/mutant-mut.txt
echo "mutant: $(grep -E '^test ' $out/mutant-mut.txt)"; grep -A1 panicked $out/mutant-mut.txt | head -3
wait
echo "parity and synth at $SECONDS s"
ab() { m=$1; v=$2; ZINC_PLUGIN_PATH=/tmp/abl/$v $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|tg128 per token|dispatches" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/counters.*per step: //;s/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2; do
  for v in head heads; do ab qwen3-30b-a3b-q4_0 $v; done
done
echo "ab at $SECONDS s"
for m in qwen3-30b-a3b llama-7b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
$bin/zinc probe > $out/probe.txt 2>&1 || true
echo "all done at $SECONDS s"
