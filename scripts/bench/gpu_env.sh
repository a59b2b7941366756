# Sourced by the GPU machine scripts (vulkan_gpu.sh, serve_gpu.sh) with $root and $bin set:
# unpacks the carried Vulkan loader (.gl/*.deb) where the image has none, points the loader
# at NVIDIA's driver, and points zinc at the carried plugins.
if ! ldconfig -p | grep -q libvulkan; then
    for f in "$root"/.gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export ZINC_PLUGIN_PATH="$bin"
