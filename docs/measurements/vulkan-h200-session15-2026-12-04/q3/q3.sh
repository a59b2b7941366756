#!/bin/bash
# Session 15, round 3: fence_wait with temporary env overrides, not committed (ZINC_VK_SLEEP_PCT=0/50/75,
# default 75 when unset); then every op-parity test on this GPU with the default (poll).
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/q3; mkdir -p $out
SECONDS=0
for m in llama-7b:q4_0 smollm2:q4_1 qwen3-30b-a3b:q4_0; do ty=${m#*:}; m=${m%:*}
  [ -f /tmp/zinc-$m-$ty.gguf ] || $bin/zinc synth --preset $m --type $ty --seed 1 --tokenizer .device/tokenizer.gguf -o /tmp/zinc-$m-$ty.gguf >/dev/null 2>&1 &
done
wait
echo "synth at $SECONDS s"
ab() { m=$1; v=$2; env $3 $bin/zinc bench -m /tmp/zinc-$m.gguf --backend vulkan -r 2 -p 8 -n 128 --batch 0 2>&1 | grep -E "tg128|tg128 per token" | tr '\n' ' ' | sed "s/^/$m $v: /;s/$/\n/" | sed 's/between steps and on the host/host/' | tee -a $out/ab.txt; }
for round in 1 2 3; do
  for v in 0 50 75; do ab llama-7b-q4_0 p$v ZINC_VK_SLEEP_PCT=$v; done
done
for m in qwen3-30b-a3b-q4_0 smollm2-q4_1; do for v in 0 50 75; do ab $m p$v ZINC_VK_SLEEP_PCT=$v; done; done
echo "ab at $SECONDS s"
mkdir -p models && cp .device/tokenizer.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v smollm2); do
    (timeout 120 $bin/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity.txt
done
grep -E "^test |panicked" $out/parity.txt
echo "all done at $SECONDS s"
