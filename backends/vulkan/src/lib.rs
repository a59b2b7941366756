//! zinc's Vulkan backend (ash, with libvulkan loaded at run time so zinc starts without it).
//!
//! Kernels are GLSL compute shaders in `shaders/`, compiled to the SPIR-V committed in
//! `spirv/` by `tools/shader-gen`; buffers are reached by device address, so dispatches need
//! no descriptor sets; a step is one recorded command buffer, one submission, one fence wait.

mod backend;
mod block_layout;
mod buffer;
mod catalogue;
mod context;
mod coopmat;
mod fence_wait;
mod kernels;
mod probe;
mod profile;
mod push_layout;
mod record;
mod shared_memory;
#[cfg(test)]
mod spirv_checks;
#[cfg(test)]
mod spirv_manifest;
mod step_buffers;
mod weights;

pub use backend::VulkanBackend;
pub use probe::{probe_vulkan, VulkanDevice};

use zinc_plugin_api::{
    module::option, BackendBox, GuardedBackend, OptionList, Plugin, PluginError, PluginResult, ProbeReport,
};

/// The vulkan plugin.
pub struct VulkanPlugin;

/// Picks the device: option `device` (an index in the loader's list, or a part of a device
/// name) overrides the ranking discrete > integrated > virtual > software.
fn choose(options: &OptionList) -> PluginResult<VulkanDevice> {
    let (report, best, all) = probe::probe_all();
    let Some(best) = best else {
        return Err(PluginError::unavailable(report.reason.to_string()));
    };
    let Some(want) = option(options, "device") else { return Ok(best) };
    let found = match want.parse::<usize>() {
        Ok(i) => all.iter().find(|d| d.index == i),
        Err(_) => all.iter().find(|d| d.info.name.to_lowercase().contains(&want.to_lowercase())),
    };
    found.cloned().ok_or_else(|| {
        let names: Vec<String> = all.iter().map(|d| format!("{}: {}", d.index, d.info.name)).collect();
        PluginError::unavailable(format!("vulkan: option device = {want:?} matches none of [{}]", names.join(", ")))
    })
}

impl Plugin for VulkanPlugin {
    const NAME: &'static str = "vulkan";

    fn probe(_options: &OptionList) -> ProbeReport {
        probe_vulkan().0
    }

    /// Options: `device` (index or name part), `int_dot = false` to use the plain kernels on
    /// a device that has integer dot products, `coopmat = false` to keep prompt chunks off
    /// the matrix units, `subgroups = false` to keep expert products at decode on the row
    /// kernel (for checking every path), `fence_wait = "poll"` or `"block"` (how a step's
    /// fence is awaited; by default GPUs poll the end of each step and software devices block),
    /// `prepare_steps = true` or `false` (whether the engine's `prepare_steps` compiles every
    /// kernel its step shapes need before the first request; by default on GPUs, not on
    /// software devices).
    fn open(options: &OptionList) -> PluginResult<BackendBox> {
        let dev = choose(options)?;
        let flag = |name: &str| match option(options, name) {
            None | Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(v) => Err(PluginError::invalid(format!("vulkan: option {name} = {v:?}; use true or false"))),
        };
        let allow =
            context::Allow { int_dot: flag("int_dot")?, coopmat: flag("coopmat")?, subgroups: flag("subgroups")? };
        let fence_wait = fence_wait::FenceWait::choose(dev.info.kind, option(options, "fence_wait"))?;
        let prepare = backend::PrepareSteps::choose(dev.info.kind, option(options, "prepare_steps"))?;
        Ok(GuardedBackend::boxed(VulkanBackend::open(dev.index, allow, fence_wait, prepare)?))
    }
}

zinc_plugin_api::export_plugin!(VulkanPlugin);
