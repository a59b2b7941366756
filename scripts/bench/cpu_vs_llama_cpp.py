#!/usr/bin/env python3
"""zinc's CPU tier against llama.cpp (llama-cpp-python) on the same file, machine and thread
count, in one run; prints each side's numbers and the ratios the CPU-tier goals are stated in:

    decode tg128 >= 1.5x, prompt pp512 >= 1.0x, 8-sequence generation >= 1.5x

Usage (after scripts/setup.sh and a release build):

    python3 -m pip install llama-cpp-python==0.3.36
    python3 scripts/bench/cpu_vs_llama_cpp.py [--model FILE] [--threads 2] [--reps 3]

Shapes follow llama-bench (pp512: one 512-token prompt; tg128: 128 tokens one at a time from
an empty context) and llama-batched-bench (8 sequences, 128-token prompts, 128 generated
tokens each, decoded together). Both sides see random token ids. pp and tg report the median
of --reps runs after a warm-up, since shared machines are noisy; the batched figures are one
run each.
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


def zinc_numbers(zinc, model, threads, reps, batch, bp, bg):
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "plugins.toml")
        with open(cfg, "w") as f:
            f.write(f'[plugins.cpu]\nthreads = {threads}\n')
        out = subprocess.run(
            [zinc, "--config", cfg, "--backend", "cpu", "bench", "--json", "-m", model, "-r", str(reps),
             "--batch", str(batch), "--batch-prompt", str(bp), "--batch-gen", str(bg)],
            check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    return {
        "pp512": statistics.median(r["tests"][0]["runs"]), "tg128": statistics.median(r["tests"][1]["runs"]),
        "batched_tg": r["batched"][0]["tg_tok_s"], "batched_pp": r["batched"][0]["pp_tok_s"],
        "device": r["device"]["name"], "backend": r["backend"], "counters": r["counters"],
    }


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


def llama_numbers(model, threads, reps, batch, bp, bg):
    ll = LlamaCpp(model, threads, batch, max(1024, batch * (bp + bg + 16)))
    pp, tg = [], []
    for r in range(reps + 1):
        ll.clear()
        toks = ll.tokens(512, r)
        t = time.perf_counter()
        ll.decode([(0, i, tok, i == 511) for i, tok in enumerate(toks)])
        if r:
            pp.append(512 / (time.perf_counter() - t))
    for r in range(reps + 1):
        ll.clear()
        toks = ll.tokens(128, 100 + r)
        t = time.perf_counter()
        for i, tok in enumerate(toks):
            ll.decode([(0, i, tok, True)])
        if r:
            tg.append(128 / (time.perf_counter() - t))
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
    return {"pp512": statistics.median(pp), "tg128": statistics.median(tg),
            "batched_tg": batch * bg / t_tg, "batched_pp": batch * bp / t_pp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--zinc", default=os.path.join(ROOT, "target/release/zinc"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    z = zinc_numbers(args.zinc, args.model, args.threads, args.reps, args.batch, 128, 128)
    l = llama_numbers(args.model, args.threads, args.reps, args.batch, 128, 128)
    print(f"model {os.path.basename(args.model)} | threads {args.threads} | zinc backend {z['backend']} on {z['device']} | llama-cpp-python {lc.__version__}")
    print("| test | zinc tok/s | llama.cpp tok/s | ratio | goal |")
    print("|---|---|---|---|---|")
    goals = {"pp512": 1.0, "tg128": 1.5, "batched_tg": 1.5, "batched_pp": None}
    names = {"pp512": "pp512", "tg128": "tg128", "batched_tg": f"{args.batch} seq generation", "batched_pp": f"{args.batch} seq prefill"}
    ok = True
    for k in ["pp512", "tg128", "batched_tg", "batched_pp"]:
        ratio = z[k] / l[k]
        goal = goals[k]
        met = "" if goal is None else ("met" if ratio >= goal else "NOT met")
        ok &= goal is None or ratio >= goal
        print(f"| {names[k]} | {z[k]:.1f} | {l[k]:.1f} | {ratio:.2f}x | {'' if goal is None else f'>= {goal}x '}{met} |")
    print(f"zinc counters: {json.dumps(z['counters'])}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
