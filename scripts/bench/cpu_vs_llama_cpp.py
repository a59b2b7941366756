#!/usr/bin/env python3
"""zinc's CPU tier against llama.cpp (llama-cpp-python) on the same files, machine and thread
count, in one run; prints each side's numbers per file and the ratios.

Usage (after scripts/setup.sh and a release build):

    python3 -m pip install llama-cpp-python==0.3.36
    python3 scripts/bench/cpu_vs_llama_cpp.py [--model FILE ...] [--threads 2] [--reps 3]
        [-p 512] [-n 128] [--batch 8]

Several --model files are measured one after another, each by both sides before the next, so
that their ratios share the machine's conditions; make K-quant and other files with
`zinc synth` (for example `--preset llama-7b --layers 4 --type q4_k_m`).

Shapes follow llama-bench (ppN: one N-token prompt; tgN: N tokens one at a time from an empty
context) and llama-batched-bench (--batch sequences, 128-token prompts, 128 generated tokens
each, decoded together; --batch 0 skips it). Both sides see random token ids. pp and tg report
the median of --reps runs after a warm-up, since shared machines are noisy; the batched figures
are one run each. The exit status is 0 whatever the ratios: goals are read from the table.
"""
import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import llama_cpp as lc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def zinc_numbers(zinc, model, threads, reps, n_prompt, n_gen, batch, bp, bg):
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "plugins.toml")
        with open(cfg, "w") as f:
            f.write(f'[plugins.cpu]\nthreads = {threads}\n')
        out = subprocess.run(
            [zinc, "--config", cfg, "--backend", "cpu", "bench", "--json", "-m", model, "-r", str(reps),
             "-p", str(n_prompt), "-n", str(n_gen),
             "--batch", str(batch), "--batch-prompt", str(bp), "--batch-gen", str(bg)],
            check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    out = {
        "pp": statistics.median(r["tests"][0]["runs"]), "tg": statistics.median(r["tests"][1]["runs"]),
        "device": r["device"]["name"], "backend": r["backend"], "counters": r["counters"],
    }
    if batch:
        out.update(batched_tg=r["batched"][0]["tg_tok_s"], batched_pp=r["batched"][0]["pp_tok_s"])
    return out


@lc.llama_log_callback
def _quiet(level, text, user_data):
    pass


class LlamaCpp:
    def __init__(self, model, threads, n_seq, n_ctx):
        lc.llama_log_set(_quiet, ctypes.c_void_p())
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(model.encode(), mp)
        cp = lc.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = 512
        cp.n_ubatch = 512
        cp.n_seq_max = n_seq
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.kv_unified = True
        self.ctx = lc.llama_init_from_model(self.model, cp)
        self.batch = lc.llama_batch_init(512, 0, n_seq)
        self.vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))

    def clear(self):
        lc.llama_memory_clear(lc.llama_get_memory(self.ctx), True)

    def decode(self, items):
        """items: list of (seq, pos, token, want_logits)."""
        b = self.batch
        for i, (s, p, t, want) in enumerate(items):
            b.token[i] = t
            b.pos[i] = p
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = s
            b.logits[i] = want
        b.n_tokens = len(items)
        rc = lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def tokens(self, n, seed):
        rng = random.Random(seed)
        return [rng.randrange(256, self.vocab) for _ in range(n)]


def llama_numbers(model, threads, reps, n_prompt, n_gen, batch, bp, bg):
    ll = LlamaCpp(model, threads, max(batch, 1), max(1024, n_prompt + n_gen + 16, batch * (bp + bg + 16)))
    pp, tg = [], []
    for r in range(reps + 1):
        ll.clear()
        toks = ll.tokens(n_prompt, r)
        t = time.perf_counter()
        for at in range(0, n_prompt, 512):
            chunk = toks[at:at + 512]
            ll.decode([(0, at + i, tok, at + i == n_prompt - 1) for i, tok in enumerate(chunk)])
        if r:
            pp.append(n_prompt / (time.perf_counter() - t))
    for r in range(reps + 1):
        ll.clear()
        toks = ll.tokens(n_gen, 100 + r)
        t = time.perf_counter()
        for i, tok in enumerate(toks):
            ll.decode([(0, i, tok, True)])
        if r:
            tg.append(n_gen / (time.perf_counter() - t))
    out = {"pp": statistics.median(pp), "tg": statistics.median(tg)}
    if not batch:
        return out
    ll.clear()
    prompts = [ll.tokens(bp, 1000 + s) for s in range(batch)]
    t = time.perf_counter()
    per_step = max(1, 512 // bp)
    for g in range(0, batch, per_step):
        items = []
        for s in range(g, min(batch, g + per_step)):
            items += [(s, i, tok, i == bp - 1) for i, tok in enumerate(prompts[s])]
        ll.decode(items)
    t_pp = time.perf_counter() - t
    t = time.perf_counter()
    for g in range(bg):
        ll.decode([(s, bp + g, 256 + (g * 31 + s * 7) % (ll.vocab - 256), True) for s in range(batch)])
    t_tg = time.perf_counter() - t
    out.update(batched_tg=batch * bg / t_tg, batched_pp=batch * bp / t_pp)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", nargs="+", default=[os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")])
    ap.add_argument("--zinc", default=os.path.join(ROOT, "target/release/zinc"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    names = {"pp": f"pp{args.n_prompt}", "tg": f"tg{args.n_gen}",
             "batched_tg": f"{args.batch} seq generation", "batched_pp": f"{args.batch} seq prefill"}
    keys = ["pp", "tg"] + (["batched_tg", "batched_pp"] if args.batch else [])
    rows = []
    for model in args.model:
        z = zinc_numbers(args.zinc, model, args.threads, args.reps, args.n_prompt, args.n_gen, args.batch, 128, 128)
        l = llama_numbers(model, args.threads, args.reps, args.n_prompt, args.n_gen, args.batch, 128, 128)
        print(f"model {os.path.basename(model)} | threads {args.threads} | zinc backend {z['backend']} on "
              f"{z['device']} | llama-cpp-python {lc.__version__}", file=sys.stderr)
        print(f"zinc counters: {json.dumps(z['counters'])}", file=sys.stderr)
        for k in keys:
            rows.append((os.path.basename(model), names[k], z[k], l[k]))
    print(f"threads {args.threads} | llama-cpp-python {lc.__version__} | reps {args.reps}")
    print("| file | test | zinc tok/s | llama.cpp tok/s | ratio |")
    print("|---|---|---|---|---|")
    for model, test, zv, lv in rows:
        print(f"| {model} | {test} | {zv:.1f} | {lv:.1f} | {zv / lv:.2f}x |")


if __name__ == "__main__":
    main()
