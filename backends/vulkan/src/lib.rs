//! zinc's Vulkan backend (ash, with libvulkan loaded at run time so zinc starts without it).

mod probe;

use zinc_plugin_api::{
    BackendBox, DeviceOnlyBackend, GuardedBackend, OptionList, Plugin, PluginError, PluginResult, ProbeReport,
};

pub use probe::{probe_vulkan, VulkanDevice};

/// The vulkan plugin.
pub struct VulkanPlugin;

impl Plugin for VulkanPlugin {
    const NAME: &'static str = "vulkan";

    fn probe(_options: &OptionList) -> ProbeReport {
        probe_vulkan().0
    }

    fn open(_options: &OptionList) -> PluginResult<BackendBox> {
        let (report, best) = probe_vulkan();
        let Some(best) = best else {
            return Err(PluginError::unavailable(report.reason.to_string()));
        };
        Ok(GuardedBackend::boxed(DeviceOnlyBackend::new(
            best.info,
            "vulkan: this build enumerates devices but has no compute kernels yet",
        )))
    }
}

zinc_plugin_api::export_plugin!(VulkanPlugin);
