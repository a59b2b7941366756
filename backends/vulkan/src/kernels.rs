//! Compute pipelines, one per SPIR-V module, created on first use (a model touches only the
//! matrix kernels of its own tensor types) and shared by every step. A server creates the ones
//! its step shapes need before its first request (`prepare_steps`, see `prepare.rs`).

use crate::push_layout::Kind;
use crate::{
    catalogue::KernelId,
    context::{vk_err, Context},
};
use ash::vk;
use std::collections::HashMap;
use zinc_plugin_api::{PluginError, PluginResult};

mod spirv {
    include!("../spirv/index.rs");
}

/// Bytes of push constants every kernel may use (Vulkan guarantees 128).
pub const PUSH_BYTES: u32 = 128;

/// The pipeline cache.
pub struct Kernels {
    pub(crate) layout: vk::PipelineLayout,
    pipelines: HashMap<KernelId, vk::Pipeline>,
    /// Pipelines created so far (the driver compiled each one).
    pub(crate) compiled: u64,
}

impl Kernels {
    /// The shared pipeline layout: push constants only.
    pub fn new(ctx: &Context) -> PluginResult<Kernels> {
        let range =
            [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(PUSH_BYTES)];
        // SAFETY: plain create with data that lives across the call.
        let layout = unsafe {
            ctx.device
                .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&range), None)
        }
        .map_err(vk_err("creating the pipeline layout"))?;
        Ok(Kernels { layout, pipelines: HashMap::new(), compiled: 0 })
    }

    /// The name of every module in this build.
    #[cfg(test)]
    pub fn module_names() -> impl Iterator<Item = &'static str> {
        spirv::MODULES.iter().map(|(n, _)| *n)
    }

    /// The pipeline for kernel `id`, created now if this is its first use.
    pub fn get(&mut self, ctx: &Context, id: KernelId) -> PluginResult<vk::Pipeline> {
        if let Some(&p) = self.pipelines.get(&id) {
            return Ok(p);
        }
        let name = id.name();
        let (_, bytes) = spirv::MODULES
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| PluginError::unsupported(format!("vulkan: no kernel {name} in this build")))?;
        let code = ash::util::read_spv(&mut std::io::Cursor::new(bytes))
            .map_err(|e| PluginError::device(format!("vulkan: kernel {name} is not valid SPIR-V: {e}")))?;
        let shared = crate::shared_memory::workgroup_bytes(&code).unwrap_or(0);
        if let Some(w) = crate::shared_memory::beyond_limit(&name, shared, &ctx.info.info.name, ctx.caps.shared_memory)
        {
            eprintln!("{w}");
        }
        // SAFETY: the module is destroyed right after the pipeline is created from it.
        unsafe {
            let module = ctx
                .device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .map_err(vk_err("loading a shader module"))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(self.layout)];
            let r = ctx.device.create_compute_pipelines(vk::PipelineCache::null(), &info, None);
            ctx.device.destroy_shader_module(module, None);
            let p = r.map_err(|(_, e)| vk_err("creating a compute pipeline")(e))?[0];
            self.pipelines.insert(id, p);
            self.compiled += 1;
            Ok(p)
        }
    }

    /// Destroys every pipeline and the layout.
    pub fn destroy(&mut self, ctx: &Context) {
        // SAFETY: the device is idle (the owner waited) and each handle is destroyed once.
        unsafe {
            for (_, p) in self.pipelines.drain() {
                ctx.device.destroy_pipeline(p, None);
            }
            ctx.device.destroy_pipeline_layout(self.layout, None);
        }
    }
}

/// The words of module `name`, read from the committed SPIR-V.
pub fn module_words(name: &str) -> Option<Vec<u32>> {
    let (_, bytes) = spirv::MODULES.iter().find(|(n, _)| *n == name)?;
    ash::util::read_spv(&mut std::io::Cursor::new(bytes)).ok()
}

/// Every module's name and words (for tests).
#[cfg(test)]
pub fn all_modules() -> Vec<(&'static str, Vec<u32>)> {
    spirv::MODULES.iter().map(|(n, _)| (*n, module_words(n).unwrap())).collect()
}

/// Push constants in the order a kernel declares them (addresses first, then 32-bit values),
/// with std430 alignment.
#[derive(Default)]
pub struct Push {
    bytes: Vec<u8>,
    /// Each value's kind, to check against the kernel's layout (`push_layout.rs`).
    kinds: Vec<Kind>,
}

impl Push {
    /// A 64-bit device address.
    pub fn addr(mut self, a: u64) -> Self {
        while !self.bytes.len().is_multiple_of(8) {
            self.bytes.push(0);
        }
        self.bytes.extend_from_slice(&a.to_le_bytes());
        self.kinds.push(Kind::Addr);
        self
    }
    /// Several 64-bit device addresses in order.
    pub fn addrs(self, a: &[u64]) -> Self {
        a.iter().fold(self, |p, &x| p.addr(x))
    }
    /// A 32-bit unsigned value.
    pub fn u32(mut self, v: u32) -> Self {
        self.kinds.push(Kind::U32);
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A 32-bit float.
    pub fn f32(mut self, v: f32) -> Self {
        self.kinds.push(Kind::F32);
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// The kind of each value, in order.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        debug_assert!(self.bytes.len() <= PUSH_BYTES as usize);
        &self.bytes
    }
}
