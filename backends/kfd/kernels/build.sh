#!/usr/bin/env bash
# Builds the amdhsa code objects in bin/ from write_value.cl with clang's amdgcn target.
#
#   bash backends/kfd/kernels/build.sh          # rebuild bin/*.hsaco
#   bash backends/kfd/kernels/build.sh --check  # fail if bin/ differs from a fresh build
#
# Needs clang-19 and lld-19 (Debian: apt-get install clang-19 lld-19). Without them --check
# says so and exits 0: the committed objects are what zinc embeds either way.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
targets="gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1200 gfx1201"
clang="${CLANG:-clang-19}"
lld="${LLD:-ld.lld-19}"
check=0
[[ "${1:-}" == "--check" ]] && check=1
if ! command -v "$clang" >/dev/null || ! command -v "$lld" >/dev/null; then
    if [[ $check == 1 ]]; then
        echo "kernels: $clang or $lld not found; skipping the code-object check"
        exit 0
    fi
    echo "kernels: need $clang and $lld (apt-get install clang-19 lld-19)" >&2
    exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
stale=0
for t in $targets; do
    "$clang" -x cl -cl-std=CL2.0 --target=amdgcn-amd-amdhsa -mcpu="$t" -nogpulib -O2 \
        -c "$here/write_value.cl" -o "$tmp/$t.o"
    "$lld" -shared "$tmp/$t.o" -o "$tmp/write_value-$t.hsaco"
    out="$here/bin/write_value-$t.hsaco"
    if [[ $check == 1 ]]; then
        if ! cmp -s "$tmp/write_value-$t.hsaco" "$out"; then
            echo "kernels: $out is stale; run bash backends/kfd/kernels/build.sh" >&2
            stale=1
        fi
    else
        cp "$tmp/write_value-$t.hsaco" "$out"
    fi
done
if [[ $check == 1 ]]; then
    [[ $stale == 0 ]] && echo "kernels: code objects match write_value.cl"
    exit $stale
fi
ls -l "$here/bin"
