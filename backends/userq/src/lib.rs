//! zinc's AMD user-mode queue backend (amdgpu DRM `USERQ`).
//!
//! This file holds the plugin entry points; [`probe`] asks the amdgpu INFO queries whether
//! compute user queues exist, [`device`] and [`queue`] create and feed one, [`smoke`] proves
//! it end to end. Built against the real kernel interface, proven only against
//! the emulated node (`emulate = "node.toml"` in the plugin's options, a test-only switch).

pub mod device;
mod probe;
pub mod queue;
pub mod smoke;

use zinc_plugin_api::{
    module::option, BackendBox, DeviceOnlyBackend, GuardedBackend, OptionList, Plugin, PluginError, PluginResult,
    ProbeReport,
};

pub use probe::{probe_userq, SLOTS_MISSING};

/// The userq plugin.
pub struct UserqPlugin;

impl Plugin for UserqPlugin {
    const NAME: &'static str = "userq";

    fn probe(options: &OptionList) -> ProbeReport {
        match zinc_amd_sys::os_for_options(option(options, "emulate")) {
            Ok(os) => probe_userq(&*os),
            Err(e) => ProbeReport::broken(format!("cannot set up the OS interface: {e}")),
        }
    }

    fn open(options: &OptionList) -> PluginResult<BackendBox> {
        let os = zinc_amd_sys::os_for_options(option(options, "emulate"))
            .map_err(|e| PluginError::unavailable(e.to_string()))?;
        let report = probe_userq(&*os);
        if !report.available {
            return Err(PluginError::unavailable(report.reason.to_string()));
        }
        let device = report.devices.first().cloned().ok_or_else(|| PluginError::unavailable("no device"))?;
        Ok(GuardedBackend::boxed(DeviceOnlyBackend::new(
            device,
            "userq: this build creates compute user queues (zinc smoke userq) but cannot run model programs on them yet",
        )))
    }

    /// Queue creation, one WRITE_DATA packet retired through the doorbell, and teardown.
    fn smoke(options: &OptionList) -> PluginResult<String> {
        let os = zinc_amd_sys::os_for_options(option(options, "emulate"))
            .map_err(|e| PluginError::unavailable(e.to_string()))?;
        smoke::smoke(os).map(|lines| lines.join("\n")).map_err(PluginError::device)
    }
}

zinc_plugin_api::export_plugin!(UserqPlugin);
