//! zinc's CPU tier: always available, and the oracle every other backend is checked against.

pub mod quant;
mod probe;

use zinc_plugin_api::{
    BackendBox, DeviceOnlyBackend, GuardedBackend, OptionList, Plugin, PluginResult, ProbeReport,
};

pub use probe::{cpu_device, probe_cpu};

/// The cpu plugin.
pub struct CpuPlugin;

impl Plugin for CpuPlugin {
    const NAME: &'static str = "cpu";

    fn probe(_options: &OptionList) -> ProbeReport {
        probe_cpu()
    }

    fn open(_options: &OptionList) -> PluginResult<BackendBox> {
        Ok(GuardedBackend::boxed(DeviceOnlyBackend::new(
            cpu_device(),
            "cpu: model execution is not built yet",
        )))
    }
}

zinc_plugin_api::export_plugin!(CpuPlugin);
