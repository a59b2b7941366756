#!/usr/bin/env bash
# The CPU kernels' tests on aarch64, on this x86-64 machine: cross-compiled, then run under
# qemu-user twice — as a CPU with the Armv8.2 dot-product extension (`-cpu max`) and as one
# without it (`-cpu cortex-a53`) — so both NEON kernel families are checked against the plain
# versions. Installs the cross linker, qemu and the aarch64 Rust standard library if missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=aarch64-unknown-linux-gnu
bash scripts/apt-install.sh "aarch64 cross-tests" gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
# `--setup` only installs (test.sh does it beside the build).
[ "${1:-}" = "--setup" ] && exit 0
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
for cpu in max cortex-a53; do
    echo "aarch64 tests on an emulated $cpu" >&2
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu $cpu" \
        cargo test --quiet --release --locked -p zinc-cpu-kernels --target "$target"
done
