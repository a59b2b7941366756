//! zinc's CPU tier: always available, and the oracle every other backend is checked against.

mod probe;

pub use zinc_cpu_kernels::{exec, pool, quant};

use zinc_plugin_api::{
    module::option, BackendBox, GuardedBackend, OptionList, Plugin, PluginError, PluginResult, ProbeReport,
};

pub use probe::{cpu_device, probe_cpu};
use quant::KQuantActivations;

/// The cpu plugin.
pub struct CpuPlugin;

impl Plugin for CpuPlugin {
    const NAME: &'static str = "cpu";

    fn probe(_options: &OptionList) -> ProbeReport {
        probe_cpu()
    }

    /// Options: `threads` (default: every hardware thread); `k_quant_activations`:
    /// `"super-blocks"` (default) or `"blocks"`, the Vulkan backend's arithmetic for K-quants,
    /// which parity tests compare against; `panels = false` keeps prompt chunks off the weight
    /// panels and sends a prompt's lone rows through attention's prompt kernel, so that every
    /// product and attention computes a row the same way whatever else is in the step (greedy
    /// output then does not depend on batching, prefix-cache hits or preemption).
    fn open(options: &OptionList) -> PluginResult<BackendBox> {
        let threads = match option(options, "threads") {
            Some(t) => t.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                PluginError::invalid(format!("cpu: option threads = {t:?} is not a positive integer"))
            })?,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let k_quant_activations = match option(options, "k_quant_activations") {
            None | Some("super-blocks") => KQuantActivations::SuperBlocks,
            Some("blocks") => KQuantActivations::Blocks,
            Some(other) => {
                return Err(PluginError::invalid(format!(
                    "cpu: option k_quant_activations = {other:?}; use \"super-blocks\" or \"blocks\""
                )))
            }
        };
        let panels = match option(options, "panels") {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => return Err(PluginError::invalid(format!("cpu: option panels = {v:?}; use true or false"))),
        };
        let mut device = cpu_device();
        device.features.push(format!("running-threads={threads}").into());
        if k_quant_activations == KQuantActivations::Blocks {
            device.features.push("k-quant-activations=blocks of 32".into());
        }
        if !panels {
            device.features.push("panels=off".into());
        }
        let mut backend = exec::CpuBackend::new(device, threads);
        backend.k_quant_activations = k_quant_activations;
        backend.panels = panels;
        Ok(GuardedBackend::boxed(backend))
    }
}

zinc_plugin_api::export_plugin!(CpuPlugin);
