//! zinc's AMD KFD backend: compute queues the runtime owns, retired by doorbell and signal.
//!
//! This file holds the plugin entry points and the probe. The driver is built against the
//! real kernel interface (`zinc-amd-sys`) and, with no AMD GPU at hand, proven only against
//! the emulated node (`emulate = "node.toml"` in the plugin's options, a test-only switch).

pub mod backend;
pub mod code_object;
pub mod driver;
mod probe;
pub mod queue_sizes;
pub mod smoke;

use zinc_plugin_api::{
    module::option, BackendBox, DeviceOnlyBackend, GuardedBackend, OptionList, Plugin, PluginError, PluginResult,
    ProbeReport,
};

pub use probe::probe_kfd;

/// The kfd plugin.
pub struct KfdPlugin;

impl Plugin for KfdPlugin {
    const NAME: &'static str = "kfd";

    fn probe(options: &OptionList) -> ProbeReport {
        match zinc_amd_sys::os_for_options(option(options, "emulate")) {
            Ok(os) => probe_kfd(&*os),
            Err(e) => ProbeReport::broken(format!("cannot set up the OS interface: {e}")),
        }
    }

    fn open(options: &OptionList) -> PluginResult<BackendBox> {
        let (os, report) = available_node(options)?;
        let device = report.devices.first().cloned().ok_or_else(|| PluginError::unavailable("no KFD GPU"))?;
        let threads = match option(options, "threads") {
            Some(t) => t
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| PluginError::invalid(format!("kfd: threads = {t:?}")))?,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        match backend::KfdBackend::open(os, device.clone(), threads) {
            Ok(b) => Ok(GuardedBackend::boxed(b)),
            // A device that cannot run our kernels still opens, and refuses models with the
            // reason, so the host falls through to the next backend when it loads one.
            Err(why) => Ok(GuardedBackend::boxed(DeviceOnlyBackend::new(device, why))),
        }
    }

    /// Queue bring-up, a barrier-AND retired by its signal, and a tiny kernel.
    fn smoke(options: &OptionList) -> PluginResult<String> {
        let (os, _) = available_node(options)?;
        smoke::smoke(os).map(|lines| lines.join("\n")).map_err(PluginError::device)
    }
}

/// The OS for these options and its probe report, or why the node cannot be used.
fn available_node(options: &OptionList) -> PluginResult<(std::sync::Arc<dyn zinc_amd_sys::Os>, ProbeReport)> {
    let os = zinc_amd_sys::os_for_options(option(options, "emulate"))
        .map_err(|e| PluginError::unavailable(e.to_string()))?;
    let report = probe_kfd(&*os);
    if !report.available {
        return Err(PluginError::unavailable(report.reason.to_string()));
    }
    Ok((os, report))
}

zinc_plugin_api::export_plugin!(KfdPlugin);
