#!/bin/bash
# Session 12: a product whose folded norm reads the residual it would add to (the guard that
# keeps that add out of the product, and a build without it); parity of the guarded build.
root=$PWD; bin=$root/.device/bin
. scripts/bench/gpu_env.sh
out=$OUT/guard; mkdir -p $out
for v in guard noguard; do mkdir -p /tmp/abl/$v/deps && xz -dc .device/abl/$v.so.xz > /tmp/abl/$v/libzinc_backend_vulkan.so && cp $bin/libzinc_backend_cpu.so /tmp/abl/$v/ && cp $bin/deps/vulkan-tests /tmp/abl/$v/deps/; done
for t in $($bin/deps/vulkan-tests --list 2>/dev/null | grep ': test$' | sed 's/: test$//' | grep -v greedy); do
  (/tmp/abl/guard/deps/vulkan-tests --exact "$t" --nocapture 2>&1 || true) >> $out/parity-guard.txt
done
echo "guard parity: $(grep -c '\.\.\. ok$' $out/parity-guard.txt) ok, $(grep -c 'FAILED$' $out/parity-guard.txt) failed"
for i in 1 2 3; do
  (/tmp/abl/noguard/deps/vulkan-tests --exact norms_rope_and_elementwise_ops_match_cpu --nocapture 2>&1 || true) >> $out/noguard.txt
done
grep -E "^test |added_to_the_normed_input" $out/noguard.txt | head -12
