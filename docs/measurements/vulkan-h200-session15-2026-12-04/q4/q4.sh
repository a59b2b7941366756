#!/bin/bash
# Session 15, round 4: (1) an ablation of the 30B-A3B decode layer with a build that leaves
# out one stage at a time in one-row steps (ablation.patch beside this script, on 5d4cbb9:
# ZINC_ABL=kernel name: the dispatch is not recorded; ZINC_ABL=topk: the experts' kernel
# skips its top-k prologue and reads the ids the prompt step left) — outputs wrong, timing
# only, to price each stage in the unprofiled stream; (2) the benchmarks with
# head = 5d4cbb9 (fence_wait, committed).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q4; mkdir -p $out
SECONDS=0
for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
mkdir -p /tmp/abl/abl && xz -dc .device/abl/abl.so.xz > /tmp/abl/abl/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/abl/
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; ZINC_PLUGIN_PATH=/tmp/abl/abl ZINC_ABL=$v $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|dispatches|tg128 per token" | tr '\n' ' ' | sed "s/^/$m abl=$v: /;s/$/\n/" | sed 's/counters.*per step: //;s/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2; do
  for v in none rope_kv_store topk matmul_f32 attention_sg; do ab qwen3-30b-a3b-q4_0 $v; done
done
echo "ab at $SECONDS s"
for m in llama-7b qwen3-30b-a3b smollm2; do ty=q4_0; [ $m = smollm2 ] && ty=q4_1
  $bin/zinc bench -m /tmp/zinc-$m-$ty.gguf --backend vulkan -r 5 --batch 0 2>&1 | grep -v uploaded > $out/bench5-$m.txt
  grep -E "pp512|tg128|device" $out/bench5-$m.txt
done
$bin/zinc bench -m /tmp/zinc-smollm2-q4_1.gguf --backend vulkan -r 1 -p 8 -n 8 --batch 0 --json 2>&1 | grep -E "fence|\"name\"|driver" > $out/features.txt
$bin/zinc probe > $out/probe.txt 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> $out/probe.txt 2>&1 || true
echo "all done at $SECONDS s"
