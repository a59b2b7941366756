//! Buffers with device addresses: every kernel reaches its operands through 64-bit addresses
//! in push constants, so no descriptor sets exist anywhere.

use crate::context::{vk_err, Context};
use ash::vk;
use gpu_allocator::{
    vulkan::{Allocation, AllocationCreateDesc, AllocationScheme},
    MemoryLocation,
};
use zinc_plugin_api::{PluginError, PluginResult};

/// A buffer, its memory and its device address.
pub struct GpuBuffer {
    pub(crate) buffer: vk::Buffer,
    allocation: Option<Allocation>,
    /// Device address of byte 0.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Where a buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Device-local: weights, KV pages, activations.
    Device,
    /// Host-visible, written by the host: staging for uploads and step inputs.
    Upload,
    /// Host-visible, read by the host: logits and swapped pages.
    Readback,
}

impl GpuBuffer {
    /// Allocates `size` bytes (at least 16) in `place`.
    pub fn new(ctx: &mut Context, name: &str, size: u64, place: Place) -> PluginResult<GpuBuffer> {
        let size = size.max(16);
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        // SAFETY: the buffer is created, bound and destroyed with this device; on any error
        // it is destroyed before returning.
        unsafe {
            let buffer = ctx
                .device
                .create_buffer(&vk::BufferCreateInfo::default().size(size).usage(usage), None)
                .map_err(vk_err("creating a buffer"))?;
            let requirements = ctx.device.get_buffer_memory_requirements(buffer);
            let location = match place {
                Place::Device => MemoryLocation::GpuOnly,
                Place::Upload => MemoryLocation::CpuToGpu,
                Place::Readback => MemoryLocation::GpuToCpu,
            };
            let allocation = match ctx.allocator.allocate(&AllocationCreateDesc {
                name,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            }) {
                Ok(a) => a,
                Err(e) => {
                    ctx.device.destroy_buffer(buffer, None);
                    return Err(PluginError::device(format!(
                        "vulkan: cannot allocate {} MiB for {name} on {}: {e}; use a smaller model or KV pool",
                        size >> 20,
                        ctx.info.info.name
                    )));
                }
            };
            if let Err(e) = ctx.device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) {
                let _ = ctx.allocator.free(allocation);
                ctx.device.destroy_buffer(buffer, None);
                return Err(vk_err("binding buffer memory")(e));
            }
            let address = ctx.device.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer));
            Ok(GpuBuffer { buffer, allocation: Some(allocation), address, size })
        }
    }

    /// The host mapping of an `Upload` or `Readback` buffer.
    pub fn mapped(&mut self) -> &mut [u8] {
        let a = self.allocation.as_mut().expect("live buffer");
        let n = self.size as usize;
        &mut a.mapped_slice_mut().expect("host-visible buffer")[..n]
    }

    /// Frees the buffer. The caller guarantees the device no longer uses it.
    pub fn free(mut self, ctx: &mut Context) {
        if let Some(a) = self.allocation.take() {
            let _ = ctx.allocator.free(a);
        }
        // SAFETY: not in use (caller's guarantee); destroyed once.
        unsafe { ctx.device.destroy_buffer(self.buffer, None) };
    }
}
