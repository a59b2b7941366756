#!/usr/bin/env python3
"""Perplexity of a text under the test models, computed by llama.cpp (llama-cpp-python) by
llama-perplexity's method, for `zinc perplexity` to be checked against (tests/tests/reference.rs).

The method: the whole text tokenized with the model's BOS (control tokens as plain text), cut
into non-overlapping chunks of CTX tokens; each chunk evaluated from an empty cache with its
first token replaced by BOS where the model adds one; the logits at positions CTX/2 .. CTX-2
score the next token. Perplexity is exp(mean negative log-probability); its error is the
mean's standard error times the perplexity, as llama-perplexity prints it. Regenerate with:

    python3 -m pip install llama-cpp-python==0.3.36 numpy
    python3 scripts/reference/perplexity_reference.py > tests/fixtures/reference/perplexity_llama_cpp.json
"""
import json
import math

import numpy as np
from llama_cpp import Llama, __version__

TEXT = "tests/fixtures/perplexity/serving-notes.txt"
MODELS = {
    "smollm2": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "models/gemma-3-270m-q4_k_m.gguf",
}
# (tokens per chunk, chunks scored): the CPU tier's test takes the first, the Vulkan test on
# software Vulkan the second.
CASES = [(512, 3), (128, 2)]


def perplexity(llm, tokens, ctx, chunks, bos):
    total, total_sq, count = 0.0, 0.0, 0
    for c in range(chunks):
        chunk = list(tokens[c * ctx:(c + 1) * ctx])
        if bos is not None:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[:ctx], dtype=np.float64)
        for j in range(ctx // 2, ctx - 1):
            row = logits[j]
            m = row.max()
            nll = m + math.log(np.exp(row - m).sum()) - row[chunk[j + 1]]
            total += nll
            total_sq += nll * nll
            count += 1
    mean = total / count
    var = max(total_sq / count - mean * mean, 0.0)
    ppl = math.exp(mean)
    return {"ctx": ctx, "chunks": chunks, "tokens_scored": count, "ppl": ppl,
            "ppl_error": math.sqrt(var / (count - 1)) * ppl}


def main():
    text = open(TEXT, encoding="utf-8").read()
    out = {"generator": f"llama-cpp-python {__version__}", "text": TEXT, "models": {}}
    for name, path in MODELS.items():
        llm = Llama(model_path=path, n_ctx=512, n_batch=512, logits_all=True, verbose=False)
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        adds_bos = llm.tokenize(b"x", add_bos=True, special=False)[0] == llm.token_bos()
        bos = llm.token_bos() if adds_bos else None
        out["models"][name] = {
            "file": path, "text_tokens": len(tokens), "adds_bos": adds_bos,
            "cases": [perplexity(llm, tokens, ctx, chunks, bos) for ctx, chunks in CASES],
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
