#!/usr/bin/env bash
# The serving benchmark (serve_bench.py) against `zinc serve` on the Vulkan backend of a GPU
# machine that has no Rust toolchain and no network: the interference and priority cases,
# REPS times each, for synthetic files made there with `zinc synth`. Prepare here:
#   cargo build --release -p zinc -p zinc-backend-cpu -p zinc-backend-vulkan
#   cargo test -p zinc-tests --test vulkan --no-run
#   bash scripts/bench/vulkan_gpu.sh --stage     # binaries to .device/ (git-ignored)
#   the `openai` package and its needs as wheels in .whl/ (git-ignored; the device README
#   says how to download them for that machine's Python)
# then on the GPU machine, from the repository root, carrying .device, .gl and .whl:
#   bash scripts/bench/serve_gpu.sh [--profile] OUTDIR REPS MODELS...
# MODELS: smollm2 llama-7b qwen3-30b-a3b. --profile first serves the long prompt alone with
# ZINC_VULKAN_PROFILE=1 and keeps the server's per-kernel device times (slower; not a
# benchmark). With ZINC_LOG=trace in the environment each run also keeps the server's log of
# every engine step (OUTDIR/zinc-MODEL-RUN.log: rows, prefill weight, seconds).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/.device/bin"
profile=0
if [ "${1:-}" = "--profile" ]; then profile=1; shift; fi
out=${1:-/tmp/zinc-serve}
reps=${2:-1}
shift $(($# < 2 ? $# : 2))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(llama-7b)
mkdir -p "$out"
. "$root/scripts/bench/gpu_env.sh"
python3 -c "import openai" 2>/dev/null || {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$root"/.whl/*.whl
    export PYTHONPATH=/tmp/site
}
export PYTHONUNBUFFERED=1
cd "$root"
"$bin/zinc" probe 2>&1 | grep -i -E "vulkan|device" | head -5 | tee "$out/probe.txt" || true
for m in "${models[@]}"; do
    ty=q4_0; [ "$m" = smollm2 ] && ty=q4_1
    f="/tmp/zinc-$m-$ty.gguf"
    [ -f "$f" ] || "$bin/zinc" synth --preset "$m" --type "$ty" --seed 1 --tokenizer "$root/.device/tokenizer.gguf" -o "$f" >/dev/null
    if [ $profile = 1 ]; then
        echo "== $m, long prompt alone, profiled"
        ZINC_VULKAN_PROFILE=1 "$bin/zinc" serve --backend vulkan -m "$f" --port 18555 >"$out/profile-$m.txt" 2>&1 &
        pid=$!
        python3 - <<'PY' 2>&1 | tee -a "$out/profile-$m.txt"
import json, sys, time, urllib.request
sys.path.insert(0, "scripts/bench")
from serve_bench import words
for _ in range(600):
    try:
        urllib.request.urlopen("http://127.0.0.1:18555/health")
        break
    except OSError:
        time.sleep(0.1)
for seed in (1, 2):
    t = time.time()
    body = json.dumps({"prompt": words(3000, seed), "max_tokens": 1}).encode()
    req = urllib.request.Request("http://127.0.0.1:18555/v1/completions", data=body, headers={"content-type": "application/json"})
    usage = json.load(urllib.request.urlopen(req))["usage"]
    print(f"long prompt {seed}: {usage['prompt_tokens']} tokens in {time.time() - t:.2f} s")
PY
        kill -INT $pid; wait $pid || true
        grep -A30 "vulkan profile" "$out/profile-$m.txt" | head -24
    fi
    for r in $(seq "$reps"); do
        echo "== $m, run $r"
        log=(); [ -n "${ZINC_LOG:-}" ] && log=(--zinc-stderr "$out/zinc-$m-$r.log")
        python3 scripts/bench/serve_bench.py --start-zinc --zinc "$bin/zinc" --zinc-args="--backend vulkan -m $f" "${log[@]}" \
            --label "zinc-vulkan-$m" --levels 1,8,32 --requests 32 --max-tokens 64 2>&1 | tee -a "$out/serve-$m.txt"
    done
done
