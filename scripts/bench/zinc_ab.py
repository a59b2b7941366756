#!/usr/bin/env python3
"""Two builds of zinc, A and B, on the same synthetic files, alternating run by run: the check
that a refactor left speed where it was. Each build is a folder holding `zinc` and its plugins
(what `vulkan_gpu.sh --stage` puts in .device/bin). Files are made once by build B's
`zinc synth --preset PRESET --type TYPE --seed 1` as /tmp/zinc-PRESET-TYPE.gguf (the name
gpu_vs_llama_cpp.py uses), unless that file is already there; only files made here are removed.

    python3 scripts/bench/zinc_ab.py --a /tmp/before --b .device/bin --tokenizer .device/tokenizer.gguf \
        --types q4_0 q4_k_m --rounds 3 [--batch 16,64,128] > ab.txt

Prints one table row per file and test: both builds' runs (tok/s), their medians and B / A.
With --batch, `zinc bench`'s batched grid runs too (that many sequences, --batch-prompt tokens
of prompt and --batch-gen generated each) and each count is a test row of its aggregate
generation rate (`bN`): the matrix-unit tiles that batched decode takes.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(build, model, args):
    """One `zinc bench` of `build` on `model`: {test name: tok/s} and the device's name."""
    env = dict(os.environ, ZINC_PLUGIN_PATH=build)
    cmd = [os.path.join(build, "zinc"), "bench", "--json", "--backend", args.backend, "-m", model, "-r", "1",
           "-p", str(args.n_prompt), "-n", str(args.n_gen), "--batch", args.batch, "--no-cpu-check"]
    if args.batch != "0":
        cmd += ["--batch-prompt", str(args.batch_prompt), "--batch-gen", str(args.batch_gen)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r = json.loads(out.stdout)
    rates = {f"pp{args.n_prompt}": r["tests"][0]["runs"][0], f"tg{args.n_gen}": r["tests"][1]["runs"][0]}
    for b in r.get("batched") or []:
        rates[f"b{b['sequences']}"] = b["tg_tok_s"]
    return rates, r["device"]["name"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="folder of build A (before)")
    ap.add_argument("--b", required=True, help="folder of build B (after)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--preset", default="llama-7b")
    ap.add_argument("--types", nargs="+", default=["q4_0", "q4_k_m"])
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", default="0", help="sequence counts of the batched grid, e.g. 16,64,128 (0: none)")
    ap.add_argument("--batch-prompt", type=int, default=8)
    ap.add_argument("--batch-gen", type=int, default=32)
    args = ap.parse_args()
    rows, device = [], "?"
    for ty in args.types:
        model = f"/tmp/zinc-{args.preset}-{ty}.gguf"
        made = not os.path.exists(model)
        if made:
            subprocess.run([os.path.join(args.b, "zinc"), "synth", "--preset", args.preset, "--type", ty, "--seed", "1",
                            "--tokenizer", args.tokenizer, "-o", model], check=True, capture_output=True)
        runs = {"a": {}, "b": {}}
        for _ in range(args.rounds):
            for side in ("a", "b"):
                rates, device = bench(getattr(args, side), model, args)
                for test, rate in rates.items():
                    runs[side].setdefault(test, []).append(rate)
        for test, a in runs["a"].items():
            b = runs["b"].get(test, [])
            if not b:
                continue
            rows.append((ty, test, a, b))
            print(f"{ty} {test}: A {a} B {b}", file=sys.stderr, flush=True)
        if made:
            os.remove(model)
    print(f"preset {args.preset} | backend {args.backend} | device {device} | rounds {args.rounds}, A and B alternating")
    print("| file | test | A runs | B runs | A median | B median | B / A |")
    print("|---|---|---|---|---|---|---|")
    for ty, test, a, b in rows:
        fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {ty} | {test} | {fmt(a)} | {fmt(b)} | {ma:,.1f} | {mb:,.1f} | {mb / ma:.3f} |")


if __name__ == "__main__":
    main()
