# Sourced by the GPU machine scripts (vulkan_gpu.sh, serve_gpu.sh) with $root and $bin set:
# unpacks the carried Vulkan loader and the GL dispatch libraries NVIDIA's driver needs
# (.gl/*.deb, as the device README lists them) every time: a machine kept warm between calls
# may hold only some of them. Then it points the loader at NVIDIA's driver and zinc at the
# carried plugins.
for f in "$root"/.gl/*.deb; do
    [ -f "$f" ] && dpkg -x "$f" /
done
ldconfig
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export ZINC_PLUGIN_PATH="$bin"
