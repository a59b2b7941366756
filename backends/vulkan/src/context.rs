//! The opened device: instance, logical device, one compute queue, a command pool, the memory
//! allocator, and what the device can do (which decides the kernel variants).

use crate::{
    catalogue::KernelId,
    fence_wait::{DeviceFence, FenceWait},
    probe::{describe, VulkanDevice},
};
use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use std::{mem::ManuallyDrop, time::Duration};
use zinc_formats::GgmlType;
use zinc_plugin_api::{PluginError, PluginResult};

/// Which optional device paths the kernels use, chosen once at open.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Packed 4×8-bit integer dot products (`VK_KHR_shader_integer_dot_product`).
    pub int_dot: bool,
    /// Cooperative matrices for prompt-chunk products (`VK_KHR_cooperative_matrix`).
    pub coopmat: bool,
    /// Subgroups of exactly 32 with arithmetic in compute shaders: the row kernels sum each
    /// output's 32 partial results with one subgroup reduction instead of shared memory, a
    /// barrier and a serial sum.
    pub subgroup_reduce: bool,
    /// The subgroup width where compute shaders have subgroup arithmetic and the width
    /// divides 64 (None otherwise). The kernels that need only that take it: the expert decode
    /// kernel (`shaders/matmul/matvec_q8.comp`, whose subgroups each compute a few features of an
    /// expert product; without it expert products take the row kernel, and the top-k stays a
    /// dispatch of its own) and the one-row attention kernel, which finds each key tile's
    /// largest score and sum of probabilities with subgroup reductions (`attention.sg`).
    pub subgroup_width: Option<u32>,
    /// The decode kernels that stage their activation row in shared memory (matmul_q8
    /// `sgx`), with norms and residual adds folded in: subgroup sums as for `subgroup_reduce`,
    /// integer dot products, and clustered subgroup operations (a quantized block's eight
    /// words meet in a cluster of eight invocations).
    pub shared_x: bool,
    /// Bytes of workgroup memory one kernel may declare (`maxComputeSharedMemorySize`): a
    /// kernel that declares more is named in a warning when its pipeline is created.
    pub shared_memory: u32,
    /// The norm kernel keeps each thread's elements in registers (`rms_norm.lowmem`) because
    /// the device offers less workgroup memory than staging a whole row takes.
    pub norm_in_registers: bool,
    /// The float prompt tiles leave out their padding (`matmul_float_tiled.*.lowmem`), for the
    /// same reason.
    pub float_tiles_unpadded: bool,
    /// Timestamps on the compute queue, for device time per step.
    pub timestamps: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period: f32,
}

/// What a device reports (and the caller allows) that decides its [`Capabilities`].
#[derive(Debug, Clone, Copy)]
pub struct DeviceFacts {
    /// Integer dot products, where allowed.
    pub int_dot: bool,
    /// Subgroup arithmetic in compute shaders, where allowed.
    pub subgroup_arithmetic: bool,
    /// The subgroup width.
    pub subgroup_size: u32,
    /// Clustered subgroup operations.
    pub clustered: bool,
    /// Cooperative matrices the kernels can use, where allowed.
    pub coopmat: bool,
    /// `maxComputeSharedMemorySize`.
    pub shared_memory: u32,
    /// Timestamps on the compute queue.
    pub timestamps: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period: f32,
}

impl Capabilities {
    /// The kernel paths a device with these facts takes: a pure function, so that tests can
    /// ask it for every combination a device could report.
    pub fn from_facts(f: DeviceFacts) -> Capabilities {
        let subgroup_reduce = f.subgroup_arithmetic && f.subgroup_size == 32;
        Capabilities {
            int_dot: f.int_dot,
            coopmat: f.coopmat,
            subgroup_reduce,
            subgroup_width: (f.subgroup_arithmetic && f.subgroup_size.is_power_of_two() && f.subgroup_size <= 64)
                .then_some(f.subgroup_size),
            shared_x: subgroup_reduce && f.int_dot && f.clustered,
            shared_memory: f.shared_memory,
            norm_in_registers: crate::shared_memory::exceeds(KernelId::RmsNorm { low_mem: false }, f.shared_memory),
            float_tiles_unpadded: crate::shared_memory::exceeds(
                KernelId::MatmulFloatTiled { ty: GgmlType::F32, low_mem: false },
                f.shared_memory,
            ),
            timestamps: f.timestamps,
            timestamp_period: f.timestamp_period,
        }
    }
}

/// Which optional paths the caller allows (the device decides whether they exist).
#[derive(Debug, Clone, Copy)]
pub struct Allow {
    /// Integer dot products.
    pub int_dot: bool,
    /// Cooperative matrices.
    pub coopmat: bool,
    /// Subgroup operations in the expert decode kernels.
    pub subgroups: bool,
}

/// Everything that lives as long as the backend.
pub struct Context {
    // Declared before the device so it is dropped first (it frees memory through the device).
    pub(crate) allocator: ManuallyDrop<Allocator>,
    pub(crate) device: ash::Device,
    pub(crate) queue: vk::Queue,
    pub(crate) pool: vk::CommandPool,
    pub(crate) caps: Capabilities,
    pub(crate) info: VulkanDevice,
    instance: ash::Instance,
}

pub(crate) fn vk_err(what: &str) -> impl Fn(vk::Result) -> PluginError + '_ {
    move |e| PluginError::device(format!("vulkan: {what} failed: {e}"))
}

impl Context {
    /// Opens physical device `index` (from the probe's enumeration). `allow.int_dot = false`
    /// forces the plain kernels even where integer dot products exist, `allow.coopmat =
    /// false` the integer tiles instead of matrix units (for tests and checks).
    pub fn open(index: usize, allow: Allow) -> PluginResult<Context> {
        let entry =
            crate::probe::loader().map_err(|e| PluginError::unavailable(format!("vulkan: loader not found ({e})")))?;
        let app = vk::ApplicationInfo::default().application_name(c"zinc").api_version(vk::API_VERSION_1_3);
        // SAFETY: create infos live across each call; every handle is destroyed in Drop or on
        // the error paths below.
        unsafe {
            let instance = entry
                .create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)
                .map_err(vk_err("creating the instance"))?;
            match Self::open_device(entry, &instance, index, allow) {
                Ok((device, queue, pool, caps, info, allocator)) => {
                    Ok(Context { allocator: ManuallyDrop::new(allocator), device, queue, pool, caps, info, instance })
                }
                Err(e) => {
                    instance.destroy_instance(None);
                    Err(e)
                }
            }
        }
    }

    #[allow(clippy::type_complexity)]
    unsafe fn open_device(
        entry: &ash::Entry,
        instance: &ash::Instance,
        index: usize,
        allow: Allow,
    ) -> PluginResult<(ash::Device, vk::Queue, vk::CommandPool, Capabilities, VulkanDevice, Allocator)> {
        let pds = instance.enumerate_physical_devices().map_err(vk_err("listing devices"))?;
        let pd = *pds.get(index).ok_or_else(|| PluginError::invalid(format!("vulkan: no device {index}")))?;
        let mut info = describe(instance, index, pd);
        let props = instance.get_physical_device_properties(pd);
        if props.api_version < vk::API_VERSION_1_3 {
            return Err(PluginError::unsupported(format!(
                "vulkan: {} offers Vulkan {}.{}; zinc's kernels need 1.3 (buffer device addresses, 64-bit integers)",
                info.info.name,
                vk::api_version_major(props.api_version),
                vk::api_version_minor(props.api_version)
            )));
        }
        let invocations = props.limits.max_compute_work_group_invocations;
        if invocations < 1024 || props.limits.max_compute_work_group_size[0] < 1024 {
            return Err(PluginError::unsupported(format!(
                "vulkan: {} allows {invocations} invocations per workgroup; the norm kernel uses 1024",
                info.info.name
            )));
        }
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12).push_next(&mut f13);
        instance.get_physical_device_features2(pd, &mut f2);
        let base = f2.features;
        if f12.buffer_device_address != vk::TRUE || base.shader_int64 != vk::TRUE {
            return Err(PluginError::unsupported(format!(
                "vulkan: {} lacks buffer device addresses or 64-bit integers in shaders",
                info.info.name
            )));
        }
        let int_dot = allow.int_dot && f13.shader_integer_dot_product == vk::TRUE;
        let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p11);
        instance.get_physical_device_properties2(pd, &mut p2);
        let arithmetic = allow.subgroups
            && p11.subgroup_supported_operations.contains(vk::SubgroupFeatureFlags::ARITHMETIC)
            && p11.subgroup_supported_stages.contains(vk::ShaderStageFlags::COMPUTE);
        let coopmat =
            if allow.coopmat { crate::coopmat::support(entry, instance, pd) } else { Err("turned off".into()) };
        let families = instance.get_physical_device_queue_family_properties(pd);
        let (family, fam) = families
            .iter()
            .enumerate()
            .find(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| PluginError::unsupported(format!("vulkan: {} has no compute queue", info.info.name)))?;
        let caps = Capabilities::from_facts(DeviceFacts {
            int_dot,
            subgroup_arithmetic: arithmetic,
            subgroup_size: p11.subgroup_size,
            clustered: p11.subgroup_supported_operations.contains(vk::SubgroupFeatureFlags::CLUSTERED),
            coopmat: coopmat.is_ok(),
            shared_memory: props.limits.max_compute_shared_memory_size,
            timestamps: fam.timestamp_valid_bits > 0 && props.limits.timestamp_period > 0.0,
            timestamp_period: props.limits.timestamp_period,
        });

        let mut e12 =
            vk::PhysicalDeviceVulkan12Features::default().buffer_device_address(true).shader_float16(caps.coopmat);
        let mut ecm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let extensions = [crate::coopmat::EXTENSION.as_ptr()];
        let mut e13 = vk::PhysicalDeviceVulkan13Features::default().shader_integer_dot_product(int_dot);
        let enable = vk::PhysicalDeviceFeatures::default().shader_int64(true);
        let prio = [1.0f32];
        let qci = [vk::DeviceQueueCreateInfo::default().queue_family_index(family as u32).queue_priorities(&prio)];
        let mut dci = vk::DeviceCreateInfo::default()
            .queue_create_infos(&qci)
            .enabled_features(&enable)
            .push_next(&mut e12)
            .push_next(&mut e13);
        if caps.coopmat {
            dci = dci.enabled_extension_names(&extensions).push_next(&mut ecm);
        }
        let device = instance.create_device(pd, &dci, None).map_err(vk_err("creating the device"))?;
        let queue = device.get_device_queue(family as u32, 0);
        let pool = match device.create_command_pool(
            &vk::CommandPoolCreateInfo::default()
                .queue_family_index(family as u32)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
            None,
        ) {
            Ok(p) => p,
            Err(e) => {
                device.destroy_device(None);
                return Err(vk_err("creating a command pool")(e));
            }
        };
        let allocator = match Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: pd,
            debug_settings: Default::default(),
            buffer_device_address: true,
            allocation_sizes: Default::default(),
        }) {
            Ok(a) => a,
            Err(e) => {
                device.destroy_command_pool(pool, None);
                device.destroy_device(None);
                return Err(PluginError::device(format!("vulkan: memory allocator: {e}")));
            }
        };
        let shared_memory = props.limits.max_compute_shared_memory_size;
        info.info.features.extend(feature_labels(caps, shared_memory, &coopmat).into_iter().map(Into::into));
        Ok((device, queue, pool, caps, info, allocator))
    }

    /// A primary command buffer from the pool.
    pub fn command_buffer(&self) -> PluginResult<vk::CommandBuffer> {
        let ai = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device.
        unsafe { self.device.allocate_command_buffers(&ai) }
            .map(|v| v[0])
            .map_err(vk_err("allocating a command buffer"))
    }

    /// Submits `cmd` and waits for it, blocking (used outside steps: uploads, page copies,
    /// swaps, where a wake-up's latency does not matter).
    pub fn submit_and_wait(&self, cmd: vk::CommandBuffer, fence: vk::Fence) -> PluginResult<()> {
        self.submit_and_wait_by(cmd, fence, FenceWait::Block, None)
    }

    /// Submits `cmd` and waits for it by `policy`, which on a GPU sleeps through half of
    /// `expected` (what the same recorded step took last time) and polls the rest.
    pub fn submit_and_wait_by(
        &self,
        cmd: vk::CommandBuffer,
        fence: vk::Fence,
        policy: FenceWait,
        expected: Option<Duration>,
    ) -> PluginResult<()> {
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        // SAFETY: cmd is recorded and ended; the fence is unsignalled and owned by the caller.
        unsafe {
            self.device.queue_submit(self.queue, &submit, fence).map_err(vk_err("submitting"))?;
            let mut awaited = DeviceFence { device: &self.device, fence };
            let r = crate::fence_wait::wait(&mut awaited, policy, expected, STEP_TIMEOUT);
            self.device.reset_fences(&[fence]).map_err(vk_err("resetting a fence"))?;
            match r {
                Ok(()) => Ok(()),
                Err(vk::Result::TIMEOUT) => Err(PluginError::device(format!(
                    "vulkan: {} did not finish work within {} s; the device may be hung",
                    self.info.info.name,
                    STEP_TIMEOUT.as_secs()
                ))),
                Err(e) => Err(vk_err("waiting for the device")(e)),
            }
        }
    }

    /// An unsignalled fence.
    pub fn fence(&self) -> PluginResult<vk::Fence> {
        // SAFETY: plain create.
        unsafe { self.device.create_fence(&vk::FenceCreateInfo::default(), None) }.map_err(vk_err("creating a fence"))
    }
}

/// Longest a step or transfer may take before it is reported as a hang.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(120);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the owner has freed every buffer and waited for the queue; the allocator is
        // dropped before the device it uses, the device before the instance.
        unsafe {
            let _ = self.device.device_wait_idle();
            ManuallyDrop::drop(&mut self.allocator);
            self.device.destroy_command_pool(self.pool, None);
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// What `zinc probe` lists of the kernel paths a device with `caps` takes (`coopmat`: the
/// matrix units' support, or why they are not used).
fn feature_labels(caps: Capabilities, shared_memory: u32, coopmat: &Result<(), String>) -> Vec<String> {
    let kernels = if caps.int_dot { "kernels=integer-dot" } else { "kernels=plain (no integer dot product)" };
    let mut out = vec![kernels.to_string()];
    if caps.subgroup_reduce && caps.int_dot {
        out.push("row-sums=subgroup".into());
    }
    if caps.shared_x {
        // Decode products of rows up to 16,384 stage the activation row in shared memory
        // (matmul_q8 `sgx`), normalising it there where a norm precedes them.
        out.push("decode-matvec=shared activations, norms folded in".into());
    }
    if caps.norm_in_registers || caps.float_tiles_unpadded {
        out.push(format!(
            "workgroup-memory={shared_memory} bytes (norm rows in registers: {}, float tiles unpadded: {})",
            caps.norm_in_registers, caps.float_tiles_unpadded
        ));
    }
    if let Some(width) = caps.subgroup_width {
        out.push("attention-softmax=subgroup".into());
        out.push(format!("expert-matvec=subgroups of {width}"));
    }
    out.push(match coopmat {
        Ok(()) => "prompt-matmul=cooperative-matrix".into(),
        Err(why) => format!("prompt-matmul=tiles ({why})"),
    });
    out
}
