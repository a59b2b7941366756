#!/usr/bin/env python3
"""Reference tokens and logits for a GGUF model, produced by llama.cpp (llama-cpp-python).

zinc's tokenizer and CPU tier are checked against this output (tests/tests/smollm2.rs), so
the numbers come from a program that is not zinc. Regenerate with:

    python3 -m pip install llama-cpp-python==0.3.36
    python3 scripts/reference/llama_cpp_reference.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
        > tests/fixtures/reference/smollm2_llama_cpp.json

A second argument `gemma` picks Gemma's turn markers instead of ChatML, and adds a prompt
longer than Gemma 3's 512-token sliding window, read with a 2048-token context.

`--kv-both` (mixture-of-experts files) also records, for every greedy step, llama.cpp's top-10
with its KV cache in f32 instead of f16 (`top_f32kv`, the same tokens fed): where a token's
expert choice is a near-tie, llama.cpp's own logits at that step move with the KV precision.

`--ctx N` reads with an N-token context instead (recorded as `n_ctx`): LongRoPE files take
their long factors where the context per sequence exceeds the original one.
"""
import json
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama, __version__

TOKENIZE = [
    "Hello world",
    "The year 2026 had 365 days, not 366.",
    "  leading spaces\tand\ttabs\n\nnew lines",
    "Unicode: café, naïve, 東京, emoji 🦀 and ünïcödé.",
    "<|im_start|>user\nHi there<|im_end|>",
    "it's they're we've I'm you'll he'd",
    "x=1;y=22;z=333;w=4444",
]
PROMPTS = [
    "The capital of France is",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    ",
]
# Gemma's turn markers in place of ChatML's, and a prompt past its 512-token sliding window
# (sentences that differ in a counter and a few words, so that attention has far keys to read).
GEMMA_TOKENIZE = [t.replace("<|im_start|>", "<start_of_turn>").replace("<|im_end|>", "<end_of_turn>") for t in TOKENIZE]
COLOURS = ["red", "green", "blue", "yellow", "black", "white", "purple"]
ANIMALS = ["fox", "owl", "cat", "horse", "whale", "crow", "bear", "otter", "lynx", "heron", "mole"]
LONG = "Here is a list to remember.\n" + "".join(
    f"Item {i} is a {COLOURS[i % 7]} {ANIMALS[i % 11]}.\n" for i in range(1, 90)) + "Item 3 is a"
GEMMA_PROMPTS = [
    "The capital of France is",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    LONG,
]
GEN_TOKENS = 24
TOP_K = 10


def top(logits):
    idx = np.argsort(-logits)[:TOP_K]
    return [[int(i), float(logits[i])] for i in idx]


def main():
    path = sys.argv[1]
    gemma = "gemma" in sys.argv[2:]
    kv_both = "--kv-both" in sys.argv[2:]
    n_ctx = 2048 if gemma else 1024
    if "--ctx" in sys.argv[2:]:
        n_ctx = int(sys.argv[sys.argv.index("--ctx") + 1])
    texts, prompts = (GEMMA_TOKENIZE, GEMMA_PROMPTS) if gemma else (TOKENIZE, PROMPTS)
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=2, logits_all=True,
                verbose=False, seed=0)
    # The same model with its KV cache in f32, loaded once (see --kv-both above).
    f32kv = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=2, logits_all=True,
                  verbose=False, seed=0, type_k=llama_cpp.GGML_TYPE_F32,
                  type_v=llama_cpp.GGML_TYPE_F32) if kv_both else None
    data = open(path, "rb").read()
    fnv = 0xcbf29ce484222325
    for b in data:
        fnv = ((fnv ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    out = {"generator": f"llama-cpp-python {__version__}", "model": path.split("/")[-1],
           "model_bytes": len(data), "model_fnv1a64": f"{fnv:016x}", "n_ctx": n_ctx,
           "tokenize": [], "prompts": []}
    for text in texts:
        out["tokenize"].append({
            "text": text,
            "special": llm.tokenize(text.encode(), add_bos=False, special=True),
            "plain": llm.tokenize(text.encode(), add_bos=False, special=False),
        })
    for prompt in prompts:
        llm.reset()
        # Gemma reads nonsense without its BOS token; the other references were made without.
        tokens = llm.tokenize(prompt.encode(), add_bos=gemma, special=True)
        llm.eval(tokens)
        scores = np.array(llm.scores[: llm.n_tokens])
        prompt_top = [{"position": p, "top": top(scores[p])}
                      for p in sorted({0, len(tokens) // 2, len(tokens) - 1})]
        steps = []
        logits = scores[len(tokens) - 1]
        for _ in range(GEN_TOKENS):
            nxt = int(np.argmax(logits))
            steps.append({"token": nxt, "top": top(logits)})
            llm.eval([nxt])
            logits = np.array(llm.scores[llm.n_tokens - 1])
        if f32kv is not None:
            f32kv.reset()
            f32kv.eval(tokens + [s["token"] for s in steps[:-1]])
            for i, s in enumerate(steps):
                s["top_f32kv"] = top(np.array(f32kv.scores[len(tokens) - 1 + i]))
        out["prompts"].append({"prompt": prompt, "add_bos": gemma, "tokens": tokens, "prompt_top": prompt_top,
                               "greedy": steps})
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
