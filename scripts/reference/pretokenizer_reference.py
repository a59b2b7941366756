#!/usr/bin/env python3
"""Token ids of llama.cpp's byte-level BPE pre-tokenizers (llama-cpp-python), for zinc's to be
checked against (tests/tests/reference.rs, `pre_tokenizers_match_llama_cpp`).

Qwen2 and Llama 3 files are too large to fetch in a test, so each pre-tokenizer runs over the
default model's vocabulary (SmolLM2's 49,152 byte-level tokens and merges): the metadata is
copied into a vocabulary-only file with `tokenizer.ggml.pre` replaced, and llama.cpp tokenizes
the texts below with it. What differs between families is the splitting of text into words
(digits one by one or three at a time, a letter run taking one leading symbol, newlines kept
with punctuation) and llama.cpp's per-family flags (Llama 3 takes a word whole when the
vocabulary has it, without merging), which these texts exercise (and, under "phi3_rule", llama.cpp's rule for files named Phi-3,
whose special tokens strip the whitespace after them). SmolLM2's vocabulary has single digits only, so three tokens are
added at its end (EXTRA_TOKENS: "12" and "123" with the merges that make them, and " zyzzyva"
with none, which only a family that takes whole words finds). Regenerate with:

    python3 -m pip install llama-cpp-python==0.3.36 gguf
    python3 scripts/reference/pretokenizer_reference.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
        > tests/fixtures/reference/pretokenizers_llama_cpp.json
"""
import json
import os
import sys
import tempfile

import gguf
from llama_cpp import Llama, __version__

PRES = ["smollm", "gpt-2", "qwen2", "deepseek-r1-qwen", "llama-bpe", "stablelm2"]
# Appended to the vocabulary (byte-level: "Ġ" is a space) and to its merges.
EXTRA_TOKENS = ["12", "123", "Ġzyzzyva"]
EXTRA_MERGES = ["1 2", "12 3"]
TEXTS = [
    "Hello world",
    "The year 2026 had 365 days; 1234567 is more than 12,345.67.",
    "abc123def 4x4 v2.0.1 0xFF",
    "IT'S THEY'RE we'VE I'M You'LL he'D don't",
    "  leading spaces\tand\ttabs\n\nnew lines\r\nand CRLF\r\n\r\n",
    "!!!\n\n??? ...\n   \n\t\nend",
    "¿Qué tal? «quotes» — dash… ellipsis",
    "Unicode: café, naïve, 東京タワー, 한국어, emoji 🦀🚀 and ünïcödé.",
    "def f(x):\n    return x**2  # square\n\n\nclass A: pass",
    "https://example.org/a_b-c?d=1&e=2 user@host.dev",
    "     five spaces, then one  two   three    four",
    "$100.00 (50%) #hashtag @mention ~tilde `code` [link](url)",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "12 345 6789 0123456789",
    "a zyzzyva, zyzzyvas and Zyzzyva",
]


# llama.cpp's rule for files named Phi-3 (special tokens strip the whitespace after them, but
# <unk>, <s> and <|endoftext|>): a file with that name and the tokens the rule names.
PHI3_NAME = "phi3 tokenizer rule"
PHI3_SPECIALS = ["</s>", "<s>", "<unk>"]
PHI3_TEXTS = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|im_end|>  \t\n  text after <s>  kept</s>   \r\nend<unk> x",
    "<|endoftext|> space kept",
]


def vocab_file(src, pre, path, name=None, specials=()):
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(path, arch=reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "tokenizer.ggml.pre":
            value = pre
        elif key == "general.name" and name:
            value = name
        elif key == "tokenizer.ggml.tokens":
            value = value + EXTRA_TOKENS + list(specials)
        elif key == "tokenizer.ggml.token_type":
            value = value + [1] * len(EXTRA_TOKENS) + [3] * len(specials)
        elif key == "tokenizer.ggml.merges":
            value = value + EXTRA_MERGES
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)
    if name and "general.name" not in reader.fields:
        writer.add_name(name)
    if "tokenizer.ggml.pre" not in reader.fields:
        writer.add_string("tokenizer.ggml.pre", pre)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    src = sys.argv[1]
    out = {"source": "llama.cpp via llama-cpp-python " + __version__, "vocabulary": os.path.basename(src),
           "extra_tokens": EXTRA_TOKENS, "extra_merges": EXTRA_MERGES, "texts": TEXTS, "pre": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRES:
            path = os.path.join(tmp, f"{pre}.gguf")
            vocab_file(src, pre, path)
            llm = Llama(path, vocab_only=True, verbose=False)
            out["pre"][pre] = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in TEXTS]
            del llm
        path = os.path.join(tmp, "phi3.gguf")
        vocab_file(src, "smollm", path, PHI3_NAME, PHI3_SPECIALS)
        llm = Llama(path, vocab_only=True, verbose=False)
        out["phi3_rule"] = {"name": PHI3_NAME, "specials": PHI3_SPECIALS, "texts": PHI3_TEXTS,
                            "ids": [llm.tokenize(t.encode(), add_bos=False, special=True) for t in PHI3_TEXTS]}
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main()
