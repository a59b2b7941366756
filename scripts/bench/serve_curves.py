#!/usr/bin/env python3
"""Throughput against concurrency for two servers on one file, in one run: `zinc serve` and
llama.cpp's `llama-server`, each driven with N streams started together (N = each level),
every stream generating --tokens tokens (`ignore_eos`) from its own short prompt. For each
server and level it reports aggregate generated tokens/s (all tokens over the wall time from
the first request to the last token), time to first token and inter-token gaps (p50, p99),
prints one table, and writes `curves.json`, `curves.txt` and `curves.svg` (aggregate tok/s and
inter-token p50 against streams, both servers) into --out. Standard library only, so it runs on
a GPU machine without packages:

    python3 scripts/bench/serve_curves.py --zinc .device/bin/zinc --llama-server /tmp/llama/llama-server \
        --model /tmp/zinc-llama-7b-q4_0.gguf --levels 1 8 32 64 128 --out /tmp/curves

Each server runs alone on the device: zinc with `--backend vulkan`, llama-server with every
layer on the GPU (`-ngl 99`) and as many slots as the largest level (`-np`), each slot's
context enough for its prompt and tokens.
"""
import argparse
import json
import os
import shlex
import subprocess
import threading
import time
import urllib.request

from gpu_vs_llama_cpp import stop, wait_healthy


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def stream(base, prompt, tokens, out):
    """One streamed completion: the time of each content chunk after the request was sent."""
    body = {"prompt": prompt, "max_tokens": tokens, "stream": True, "ignore_eos": True, "temperature": 0}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    stamps = []
    with urllib.request.urlopen(req, timeout=900) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if any(c.get("text") for c in chunk.get("choices", [])):
                stamps.append(time.perf_counter())
    out.append((t0, stamps))


def level(base, n, tokens):
    results = []
    threads = [threading.Thread(target=stream, args=(base, f"Story {i}: once upon a time", tokens, results))
               for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = max((s[-1] for _, s in results if s), default=start)
    generated = sum(len(s) for _, s in results)
    ttft = [s[0] - t0 for t0, s in results if s]
    gaps = [b - a for _, s in results for a, b in zip(s, s[1:])]
    return {
        "streams": n, "completed": len(results), "chunks": generated,
        "tok_s": generated / (end - start) if end > start else 0.0,
        "ttft_p50_ms": pct(ttft, 50) * 1e3, "ttft_p99_ms": pct(ttft, 99) * 1e3,
        "itl_p50_ms": pct(gaps, 50) * 1e3, "itl_p99_ms": pct(gaps, 99) * 1e3,
    }


def run_server(cmd, base, levels, tokens, log):
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_healthy(base, proc, limit_s=600)
        level(base, min(levels), 16)  # warm-up: the first steps compile and record
        return [level(base, n, tokens) for n in levels]
    finally:
        stop(proc)


def svg(curves, levels):
    """Two panels, aggregate tok/s and inter-token p50 against streams (the levels evenly spaced)."""
    w, h, pad = 420, 280, 50
    colours = {"zinc": "#1f77b4", "llama-server": "#d62728"}
    xs = {n: pad + (w - 2 * pad) * (i / max(1, len(levels) - 1)) for i, n in enumerate(levels)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h}" font-family="sans-serif" font-size="11">']
    for panel, (key, title) in enumerate([("tok_s", "aggregate tok/s"), ("itl_p50_ms", "inter-token p50 (ms)")]):
        ox = panel * w
        top = max((r[key] for rows in curves.values() for r in rows), default=1) or 1
        y = lambda v: h - pad - (h - 2 * pad) * v / top
        out.append(f'<text x="{ox + w / 2}" y="20" text-anchor="middle">{title}</text>')
        out.append(f'<line x1="{ox + pad}" y1="{h - pad}" x2="{ox + w - pad}" y2="{h - pad}" stroke="black"/>')
        out.append(f'<line x1="{ox + pad}" y1="{pad}" x2="{ox + pad}" y2="{h - pad}" stroke="black"/>')
        for frac in (0, 0.5, 1):
            out.append(f'<text x="{ox + pad - 4}" y="{y(top * frac) + 4}" text-anchor="end">{top * frac:.0f}</text>')
        for n in levels:
            out.append(f'<text x="{ox + xs[n]}" y="{h - pad + 14}" text-anchor="middle">{n}</text>')
        out.append(f'<text x="{ox + w / 2}" y="{h - 10}" text-anchor="middle">streams</text>')
        for i, (name, rows) in enumerate(curves.items()):
            c = colours.get(name, "#555")
            pts = " ".join(f"{ox + xs[r['streams']]:.1f},{y(r[key]):.1f}" for r in rows)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
            out.append(f'<text x="{ox + pad + 8}" y="{pad + 14 * i}" fill="{c}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zinc", required=True)
    ap.add_argument("--llama-server", default="llama-server")
    ap.add_argument("--model", required=True)
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=18093)
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--out", default="/tmp/serve-curves")
    ap.add_argument("--servers", nargs="+", default=["zinc", "llama-server"])
    ap.add_argument("--zinc-args", default="", help="more `zinc serve` options, one string (e.g. '--kv-window-seqs 0')")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    base = f"http://127.0.0.1:{args.port}"
    top = max(args.levels)
    ctx = 64 + args.tokens
    servers = {
        "zinc": [args.zinc, "serve", "--backend", args.backend, "-m", args.model, "--port", str(args.port),
                 "--kv-tokens", str(top * ctx + 4096), "--step-tokens", str(max(512, top)), *shlex.split(args.zinc_args)],
        "llama-server": [args.llama_server, "-m", args.model, "--port", str(args.port), "-ngl", "99",
                         "-np", str(top), "-c", str(top * ctx)],
    }
    curves = {}
    for name in args.servers:
        try:
            curves[name] = run_server(servers[name], base, args.levels, args.tokens, os.path.join(args.out, f"{name}.log"))
        except Exception as e:  # a server that fails leaves the other's curve
            print(f"{name}: {e} (its log: {args.out}/{name}.log)")
    lines = [f"file {os.path.basename(args.model)} | {args.tokens} tokens per stream, streams started together",
             "| server | streams | tok/s | TTFT p50 ms | TTFT p99 ms | inter-token p50 ms | p99 ms | chunks |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in curves.items():
        for r in rows:
            lines.append(f"| {name} | {r['streams']} | {r['tok_s']:,.0f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} "
                         f"| {r['itl_p50_ms']:.2f} | {r['itl_p99_ms']:.2f} | {r['chunks']} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "curves.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "curves.json"), "w") as f:
        json.dump(curves, f, indent=1)
    with open(os.path.join(args.out, "curves.svg"), "w") as f:
        f.write(svg(curves, args.levels))


if __name__ == "__main__":
    main()
