#!/usr/bin/env python3
"""Throughput of constrained decoding: `zinc serve` generating with and without a JSON schema,
at 1 and 16 concurrent streams (issue 28's benchmark), in one run on one server.

Every request generates exactly --tokens tokens: the unconstrained ones with `ignore_eos`, the
constrained ones under a schema that cannot close before that (an array of at least 400
integers). Aggregate tokens per second come from the server's usage counts over the wall time
of the whole round; each case runs --reps rounds after a warm-up round.

    python3 scripts/bench/structured_bench.py [--zinc target/release/zinc] [--backend cpu]
        [--streams 1 16] [--tokens 128] [--reps 3] [--model FILE]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 400}


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def one(url, constrained, tokens, out, k):
    body = {"messages": [{"role": "user", "content": f"Write a long list of numbers, list {k}."}],
            "max_tokens": tokens, "temperature": 0.7, "seed": k}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "numbers", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    r = post(url + "/chat/completions", body)
    out[k] = r["usage"]["completion_tokens"]


def round_(url, constrained, streams, tokens):
    out = [0] * streams
    threads = [threading.Thread(target=one, args=(url, constrained, tokens, out, k)) for k in range(streams)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    assert all(n == tokens for n in out), f"a request generated {out} tokens, not {tokens}"
    return sum(out) / wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zinc", default=os.path.join(ROOT, "target", "release", "zinc"))
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--model")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cmd = [args.zinc, "--backend", args.backend, "serve", "--port", "0", "--kv-tokens", "32768"]
    if args.model:
        cmd += ["-m", args.model]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r"http://[^ ]+/v1", proc.stdout.readline())
        if not m:
            sys.exit("zinc serve did not start")
        url = m.group(0)
        health = json.loads(urllib.request.urlopen(url[:-3] + "/health").read())
        print(f"model {health['model']} | backend {health['backend']} | device {health['device']} | "
              f"{args.tokens} tokens per request, median of {args.reps} rounds")
        print("| streams | plain tok/s | JSON schema tok/s | ratio |")
        print("|---|---|---|---|")
        for n in args.streams:
            rates = {}
            for constrained in (False, True):
                round_(url, constrained, n, args.tokens)
                rates[constrained] = statistics.median(
                    round_(url, constrained, n, args.tokens) for _ in range(args.reps))
            print(f"| {n} | {rates[False]:.1f} | {rates[True]:.1f} | {rates[True] / rates[False]:.3f} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
