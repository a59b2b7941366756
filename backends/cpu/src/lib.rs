//! zinc's CPU tier: always available, and the oracle every other backend is checked against.

mod probe;

pub use zinc_cpu_kernels::{exec, pool, quant};

use zinc_plugin_api::{
    module::option, BackendBox, GuardedBackend, OptionList, Plugin, PluginError, PluginResult, ProbeReport,
};

pub use probe::{cpu_device, probe_cpu};

/// The cpu plugin.
pub struct CpuPlugin;

impl Plugin for CpuPlugin {
    const NAME: &'static str = "cpu";

    fn probe(_options: &OptionList) -> ProbeReport {
        probe_cpu()
    }

    /// Options: `threads` (default: every hardware thread).
    fn open(options: &OptionList) -> PluginResult<BackendBox> {
        let threads = match option(options, "threads") {
            Some(t) => t.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                PluginError::invalid(format!("cpu: option threads = {t:?} is not a positive integer"))
            })?,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let mut device = cpu_device();
        device.features.push(format!("running-threads={threads}").into());
        Ok(GuardedBackend::boxed(exec::CpuBackend::new(device, threads)))
    }
}

zinc_plugin_api::export_plugin!(CpuPlugin);
