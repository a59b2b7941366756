#!/usr/bin/env python3
"""Serving benchmark for any OpenAI-compatible server, in the shapes users already trust.

  * concurrency levels (default 1, 4, 8, 16, 32): each level sends `--requests` streaming
    completions (at least twice the level) with Poisson arrivals and at most that many in
    flight (as vLLM's `bench serve --max-concurrency`), and reports aggregate generated
    tokens/s, time to first token and inter-token latency at p50 and p99;
  * interference: four streams generate continuously while one 3,000-word prompt arrives;
    reports the streams' worst inter-token gap during the long prompt against their p99 gap
    without it, and the long prompt's TTFT against its prefill time alone;
  * priority: an interactive tenant's TTFT p99 while a batch tenant keeps 16 long requests in
    flight, against its unloaded value (with --start-zinc the two are real tenants, keys
    `interactive-key` and `batch-key`; a peer server sees the same keys and may ignore them).

The same script drives zinc and a peer (for example llama-server) through the same client:

    python3 scripts/bench/serve_bench.py --start-zinc            # starts target/release/zinc
    python3 scripts/bench/serve_bench.py --url http://127.0.0.1:8080/v1 --label llama-server

On a GPU machine, scripts/bench/serve_gpu.sh runs it against zinc on the Vulkan backend.
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def stream_one(c, prompt, max_tokens, out):
    t0 = time.time()
    first, times = None, []
    for chunk in c.completions.create(model="m", prompt=prompt, max_tokens=max_tokens, temperature=0.8,
                                      stream=True, extra_body={"ignore_eos": True}):
        if chunk.choices and chunk.choices[0].text:
            now = time.time()
            if first is None:
                first = now - t0
            times.append(now)
    out.append({"ttft": first, "itl": [b - a for a, b in zip(times, times[1:])], "tokens": len(times),
                "start": t0, "end": time.time(), "times": times})


def level(c, conc, n_req, max_tokens, rng):
    """`n_req` streaming requests with Poisson arrivals, at most `conc` in flight (vLLM's
    `bench serve --max-concurrency`). The arrival rate is twice what `conc` streams of the
    warm-up requests' speed would sustain (the fastest of three: a fresh server's first request
    also pays its warm-up, which on a GPU made the rate, not the cap, set the load), so the cap
    sets the load and tok/s measures the server at `conc` streams. TTFT counts from when a
    request is sent."""
    out, threads = [], []
    probe = []
    for _ in range(3):
        stream_one(c, "Warm-up request.", 16, probe)
    per_stream = max(min(p["end"] - p["start"] for p in probe), 0.05) * max_tokens / 16
    rate = 2 * conc / per_stream
    slots = threading.Semaphore(conc)

    def one(i):
        with slots:
            stream_one(c, f"Request {i}: write about topic {rng.randint(0, 999)}.", max_tokens, out)

    t_start = time.time()
    for i in range(n_req):
        th = threading.Thread(target=one, args=(i,))
        th.start()
        threads.append(th)
        time.sleep(rng.expovariate(rate))
    for th in threads:
        th.join()
    wall = max(o["end"] for o in out) - t_start
    itl = [g for o in out for g in o["itl"]]
    ttft = [o["ttft"] for o in out if o["ttft"] is not None]
    return {"conc": conc, "tok_s": sum(o["tokens"] for o in out) / wall, "ttft_p50": pct(ttft, 50),
            "ttft_p99": pct(ttft, 99), "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99)}


def words(n, seed):
    rng = random.Random(seed)
    vocab = ["river", "stone", "light", "cloud", "north", "garden", "engine", "paper", "silver", "window",
             "market", "forest", "signal", "winter", "harbor", "copper", "meadow", "canvas", "thunder", "lantern"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def stream_until(c, name, stop, out):
    """Streams requests one after another until `stop` is set; appends each token's arrival
    time, per request, to `out`."""
    i = 0
    while not stop.is_set():
        times = []
        for chunk in c.completions.create(model="m", prompt=f"{name} request {i}.", max_tokens=256,
                                          temperature=0.8, stream=True, extra_body={"ignore_eos": True}):
            if chunk.choices and chunk.choices[0].text:
                times.append(time.time())
            if stop.is_set():
                break
        out.append(times)
        i += 1


def interference(c):
    """Four streams generate continuously; one 3,000-word prompt arrives. Reports the streams'
    worst inter-token gap while the long prompt is in flight against their p99 gap without it,
    and the long prompt's time to first token against its time alone."""
    # Two different 3,000-word prompts, so the second cannot be served from the prefix cache.
    t = time.time()
    c.completions.create(model="m", prompt=words(3000, 1), max_tokens=1)
    alone = time.time() - t

    def run_streams(seconds_or_until):
        stop, per_stream = threading.Event(), [[] for _ in range(4)]
        threads = [threading.Thread(target=stream_until, args=(c, f"Stream {i}", stop, per_stream[i]))
                   for i in range(4)]
        [th.start() for th in threads]
        window = seconds_or_until()
        stop.set()
        [th.join() for th in threads]
        gaps = [(a, b) for s in per_stream for times in s for a, b in zip(times, times[1:])]
        return gaps, window

    def unloaded():
        time.sleep(1.0)
        t0 = time.time()
        time.sleep(3.0)
        return t0, time.time()

    gaps, (u0, u1) = run_streams(unloaded)
    unloaded_p99 = pct([b - a for a, b in gaps if a >= u0 and b <= u1], 99)
    long_t = {}

    def loaded():
        time.sleep(1.0)
        t0 = time.time()
        c.completions.create(model="m", prompt=words(3000, 2), max_tokens=1)
        long_t["ttft"] = time.time() - t0
        return t0, time.time()

    gaps, (l0, l1) = run_streams(loaded)
    # Every gap that overlaps the long prompt's time in the server.
    during = [b - a for a, b in gaps if b >= l0 and a <= l1]
    return {"unloaded_itl_p99": unloaded_p99, "worst_gap": max(during), "long_ttft": long_t["ttft"],
            "long_alone": alone, "gaps_during": len(during)}


def priority(url, max_tokens):
    inter = openai.OpenAI(base_url=url, api_key="interactive-key", max_retries=0, timeout=600)
    batch = openai.OpenAI(base_url=url, api_key="batch-key", max_retries=0, timeout=600)

    def ttfts(n):
        out = []
        for i in range(n):
            res = []
            stream_one(inter, f"Quick question {i}: name a colour.", 8, res)
            out.append(res[0]["ttft"])
        return out

    unloaded = ttfts(8)
    stop = threading.Event()
    done = []

    def flood():
        while not stop.is_set():
            stream_one(batch, f"Batch job: summarise topic {random.randint(0, 999)} at length.", max_tokens, done)

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(16)]
    [t.start() for t in threads]
    time.sleep(3)
    t0 = time.time()
    loaded = ttfts(8)
    t1 = time.time()
    stop.set()
    [t.join(600) for t in threads]
    # The batch tenant's generated tokens per second while the interactive requests ran.
    batch_tokens = sum(sum(1 for t in o["times"] if t0 <= t <= t1) for o in done)
    return {"unloaded_p99": pct(unloaded, 99), "loaded_p99": pct(loaded, 99), "batch_tok_s": batch_tokens / (t1 - t0)}


TENANTS = """
[[tenants]]
name = "interactive"
key_sha256 = "{ik}"
priority = "interactive"
[[tenants]]
name = "batch"
key_sha256 = "{bk}"
priority = "batch"
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--start-zinc", action="store_true")
    ap.add_argument("--label", default="zinc")
    ap.add_argument("--levels", default="1,4,8,16,32")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: levels, interference, priority")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--zinc", default=os.path.join(ROOT, "target/release/zinc"),
                    help="the zinc binary --start-zinc runs")
    ap.add_argument("--zinc-args", default="",
                    help="more `zinc serve` arguments for --start-zinc, e.g. \"--backend vulkan -m FILE\"")
    ap.add_argument("--zinc-stderr", help="with --start-zinc, write the server's stderr here (with ZINC_LOG=trace "
                    "in the environment it logs every engine step: rows, prefill weight, seconds)")
    args = ap.parse_args()
    proc = None
    url = args.url
    if args.start_zinc:
        import hashlib
        import tempfile
        tenants = os.path.join(tempfile.mkdtemp(), "tenants.toml")
        with open(tenants, "w") as f:
            f.write(TENANTS.format(ik=hashlib.sha256(b"interactive-key").hexdigest(),
                                   bk=hashlib.sha256(b"batch-key").hexdigest()))
        cmd = [args.zinc, "serve", "--port", "0", "--tenants", tenants] + args.zinc_args.split()
        err = open(args.zinc_stderr, "w") if args.zinc_stderr else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        url = re.search(r"http://\S+/v1", proc.stdout.readline()).group(0)
    try:
        c = openai.OpenAI(base_url=url, api_key=os.environ.get("OPENAI_API_KEY", "interactive-key"), max_retries=0, timeout=600)
        rng = random.Random(7)
        print(f"server {args.label} at {url}; {args.requests} requests per level, {args.max_tokens} tokens each")
        print("| streams | tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms |\n|---|---|---|---|---|---|")
        skip = set(args.skip.split(","))
        for conc in [] if "levels" in skip else [int(x) for x in args.levels.split(",")]:
            r = level(c, conc, max(args.requests, 2 * conc), args.max_tokens, rng)
            print(f"| {conc} | {r['tok_s']:.1f} | {r['ttft_p50']:.2f} | {r['ttft_p99']:.2f} | {r['itl_p50']*1e3:.0f} | {r['itl_p99']*1e3:.0f} |", flush=True)
        i = interference(c) if "interference" not in skip else None
        if i:
            print(f"interference: worst gap {i['worst_gap']:.3f} s vs unloaded p99 {i['unloaded_itl_p99']:.3f} s "
                  f"({i['worst_gap'] / i['unloaded_itl_p99']:.1f}x, {i['gaps_during']} gaps during the long "
                  f"prompt); long prompt TTFT {i['long_ttft']:.1f} s vs {i['long_alone']:.1f} s alone "
                  f"({i['long_ttft'] / i['long_alone']:.2f}x)", flush=True)
        if "priority" not in skip:
            p = priority(url, args.max_tokens)
            print(f"priority: interactive TTFT p99 {p['loaded_p99']:.2f} s under a saturating batch tenant vs "
                  f"{p['unloaded_p99']:.2f} s unloaded ({p['loaded_p99'] / p['unloaded_p99']:.1f}x); the batch tenant "
                  f"generated {p['batch_tok_s']:.0f} tok/s meanwhile")
    finally:
        if proc:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)


if __name__ == "__main__":
    main()
