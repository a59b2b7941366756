#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/TARGET/): small valid inputs the
fuzzers start from and mutate. Committed with their output; regenerate with

    .venv/bin/python fuzz/seeds.py        (needs numpy and gguf: pip install numpy gguf)

The model files are tiny llama files (a 262-token byte-level vocabulary, 16 or 32 features,
one layer) that zinc loads, so that mutations reach the model program and the tokenizer.
"""
import json
import os

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def byte_chars():
    """GPT-2's byte → character table."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def tiny_model(path, n_embd, qtype):
    tokens = byte_chars() + ["ab", "abc", "<|im_start|>", "<|im_end|>"]
    types = [1] * 258 + [3, 3]
    n_vocab, n_ff, n_head, n_kv = len(tokens), 2 * n_embd, 2, 1
    head = n_embd // n_head
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_context_length(64)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b", "ab c"])
    w.add_bos_token_id(258)
    w.add_eos_token_id(259)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    rng = np.random.default_rng(1)

    def t(name, shape, quantize=True):
        data = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if quantize and qtype != gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data)

    t("token_embd.weight", (n_vocab, n_embd))
    t("output_norm.weight", (n_embd,), False)
    t("output.weight", (n_vocab, n_embd))
    t("blk.0.attn_norm.weight", (n_embd,), False)
    t("blk.0.attn_q.weight", (n_embd, n_embd))
    t("blk.0.attn_k.weight", (head * n_kv, n_embd))
    t("blk.0.attn_v.weight", (head * n_kv, n_embd))
    t("blk.0.attn_output.weight", (n_embd, n_embd))
    t("blk.0.ffn_norm.weight", (n_embd,), False)
    t("blk.0.ffn_gate.weight", (n_ff, n_embd))
    t("blk.0.ffn_up.weight", (n_ff, n_embd))
    t("blk.0.ffn_down.weight", (n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    d = os.path.join(HERE, "corpus", "gguf")
    os.makedirs(d, exist_ok=True)
    tiny_model(os.path.join(d, "tiny-llama-f32.gguf"), 16, gguf.GGMLQuantizationType.F32)
    tiny_model(os.path.join(d, "tiny-llama-q8_0.gguf"), 32, gguf.GGMLQuantizationType.Q8_0)

    # Tokenizer: the first byte picks the model (even: SmolLM2, odd: Gemma 3).
    texts = ["Hello world", "The year 2026 had 365 days.", "  spaces\tand\ttabs\n\nnew lines\r\n",
             "Unicode: café, 東京, emoji 🦀", "<|im_start|>user\nHi<|im_end|>", "<start_of_turn>user\nHi<end_of_turn>",
             "it's they're I'm", "x=1;y=22;z=333", "a" * 300]
    for i, text in enumerate(texts):
        write("tokenizer", f"smollm2-{i}", b"\x00" + text.encode())
        write("tokenizer", f"gemma3-{i}", b"\x01" + text.encode())

    # Chat templates: the first byte's low bit picks a template from the input (1) or the
    # model's own (0); the next bit the model. Parts are separated by 0xFF.
    sep = b"\xff"
    write("chat_template", "smollm2-chatml", b"\x00" + sep.join([b"You are kind.", b"Hi <|im_start|>system", b"Hello", b"More"]))
    write("chat_template", "gemma3", b"\x02" + sep.join([b"Be brief.", b"<start_of_turn>model\nHi", b"Yes"]))
    write("chat_template", "loop", b"\x01" + sep.join([
        b"{% for i in range(1000) %}{% for m in messages %}{{ m.content|upper }}{% endfor %}{% endfor %}", b"a", b"b"]))
    write("chat_template", "macro", b"\x01" + sep.join([
        b"{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}x{% endif %}{% endmacro %}{{ f(50) }}{{ messages[0].content.strip().split(' ') }}",
        b" hello world "]))
    write("chat_template", "raise", b"\x03" + sep.join([
        b"{% if messages|length > 1 %}{{ raise_exception('too many') }}{% endif %}{{ bos_token }}{{ messages[0]['content'] }}",
        b"one", b"two"]))

    # Request bodies.
    chats = [
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        {"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}],
         "temperature": 0.7, "top_p": 0.9, "stop": ["\n", "END"], "logprobs": True, "top_logprobs": 3},
        {"messages": [{"role": "user", "content": "Weather?"}],
         "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}}}], "tool_choice": "required"},
        {"messages": [{"role": "user", "content": "JSON please"}],
         "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
             "type": "object", "properties": {"a": {"type": "integer", "minimum": 0},
                                              "b": {"type": "array", "items": {"enum": ["x", "y"]}}},
             "required": ["a"]}}}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]},
                      {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
         "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]},
        {"messages": [{"role": "user", "content": "lark"}], "grammar": "start: \"yes\" | \"no\""},
    ]
    for i, body in enumerate(chats):
        write("request", f"chat-{i}", json.dumps(body))
    completions = [
        {"prompt": "Once upon a time", "max_tokens": 4, "logprobs": 2},
        {"prompt": [1, 2, 3], "max_tokens": 0, "echo": True, "logprobs": 0},
        {"prompt": "x", "response_format": {"type": "json_object"}, "seed": 7, "stream": True,
         "stream_options": {"include_usage": True}},
    ]
    for i, body in enumerate(completions):
        write("request", f"completion-{i}", json.dumps(body))

    # Output stage: stop strings, then the generated bytes, separated by 0xFF.
    write("output_stage", "one-stop", b"END" + sep + b"hello ENwait END world")
    write("output_stage", "two-stops", b"\n\n" + sep + b"ab" + sep + b"line\nline\n\nnext")
    write("output_stage", "utf8", "«fin»".encode() + sep + "café «fi «fin» after".encode())
    write("output_stage", "split-char", b"\xc3" + sep + "é is two bytes".encode())
    write("output_stage", "no-stop", b"just text, no stop strings at all")
    # A CI run's finding: the last token completes one stop string ("\ufffd" for a bad byte)
    # and the flush at the length limit would have completed an earlier-starting one.
    write("output_stage", "flush-after-a-completed-stop", bytes.fromhex("bfff68c3dcff00e16c6c6f2045ff68c3dc"))


if __name__ == "__main__":
    main()
