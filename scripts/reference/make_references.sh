#!/usr/bin/env bash
# Regenerates every llama.cpp reference fixture. Needs llama-cpp-python==0.3.36 and gguf in the
# Python that runs it ($PYTHON, default python3) and a built zinc (for the synthetic models).
# The synthetic files are deterministic: tests rebuild them with the same zinc synth command.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
zinc=${ZINC:-$root/target/debug/zinc}
out="$root/tests/fixtures/reference"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$root/scripts/reference/quant_blocks.py" > "$out/quant_blocks.json"
"$py" "$root/scripts/reference/llama_cpp_reference.py" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" > "$out/smollm2_llama_cpp.json"
"$py" "$root/scripts/reference/pretokenizer_reference.py" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" > "$out/pretokenizers_llama_cpp.json"
bash "$root/scripts/fetch-model.sh" gemma3
"$py" "$root/scripts/reference/llama_cpp_reference.py" "$root/models/gemma-3-270m-q4_k_m.gguf" gemma > "$out/gemma3_llama_cpp.json"
for preset in tiny-llama31 tiny-qwen2 tiny-qwen2-yarn tiny-phi3 tiny-phi3-longrope tiny-phi4-mini tiny-qwen3 tiny-qwen3moe tiny-mixtral tiny-gemma2; do
    "$zinc" synth --preset "$preset" --seed 1 -o "$tmp/$preset.gguf" 2>/dev/null >/dev/null
    # Expert routing can sit on a near-tie that the KV cache's precision tips (see the script).
    kv=""; case $preset in *moe|*mixtral) kv=--kv-both;; esac
    "$py" "$root/scripts/reference/llama_cpp_reference.py" "$tmp/$preset.gguf" $kv > "$out/${preset}_llama_cpp.json"
done
# LongRoPE past its original context (1,024 tokens in the preset): the long factors.
"$py" "$root/scripts/reference/llama_cpp_reference.py" "$tmp/tiny-phi3-longrope.gguf" --ctx 2048 \
    > "$out/tiny-phi3-longrope-2048_llama_cpp.json"
(cd "$root" && "$py" scripts/reference/perplexity_reference.py > "$out/perplexity_llama_cpp.json")
