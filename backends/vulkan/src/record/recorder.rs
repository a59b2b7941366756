//! The recorder: dispatches into one command buffer, with a barrier only where a dispatch
//! reads or overwrites memory that an earlier, unbarriered one wrote (or overwrites memory
//! one read).

use super::MAX_GROUPS;
use crate::catalogue::KernelId;
use crate::{
    context::Context,
    kernels::{Kernels, Push},
    step_buffers::Q8Buf,
};
use ash::vk;
use std::collections::HashSet;
use zinc_plugin_api::{PluginError, PluginResult};

/// Dispatches recorded so far, and what they touched since the last barrier.
pub(super) struct Recorder<'a> {
    pub(super) ctx: &'a Context,
    pub(super) kernels: &'a mut Kernels,
    pub(super) cmd: vk::CommandBuffer,
    pub(super) written: HashSet<u64>,
    pub(super) read: HashSet<u64>,
    pub(super) dispatches: u32,
    /// Per-dispatch timestamps (profiling) and the kernel of each dispatch.
    pub(super) profile: Option<vk::QueryPool>,
    pub(super) names: Vec<String>,
    /// Profile entries name the grid too (`ZINC_VULKAN_PROFILE=grid`), so that products of
    /// different shapes under one kernel are told apart.
    pub(super) profile_grid: bool,
    /// A transfer (the step's input copy) precedes the next barrier.
    pub(super) after_transfer: bool,
}

impl Recorder<'_> {
    /// A barrier between dispatches. It also orders transfers only where a transfer is on
    /// one side: after the step's input copy (the first barrier) and before the logits copy
    /// (`to_transfer`). A barrier that names the transfer stage costs more than a
    /// compute-only one on some drivers, and a decode step records a few hundred barriers.
    pub(super) fn barrier_with(&mut self, to_transfer: bool) {
        let (mut src_stage, mut dst_stage) =
            (vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::COMPUTE_SHADER);
        let (mut src_access, mut dst_access) = (vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::SHADER_READ);
        // Write-after-read hazards need only the execution dependency, which the stages give.
        dst_access |= vk::AccessFlags::SHADER_WRITE;
        if self.after_transfer {
            src_stage |= vk::PipelineStageFlags::TRANSFER;
            src_access |= vk::AccessFlags::TRANSFER_WRITE;
        }
        if to_transfer {
            dst_stage |= vk::PipelineStageFlags::TRANSFER;
            dst_access |= vk::AccessFlags::TRANSFER_READ;
        }
        let mb = [vk::MemoryBarrier::default().src_access_mask(src_access).dst_access_mask(dst_access)];
        // SAFETY: recording into a command buffer in the recording state.
        unsafe {
            self.ctx.device.cmd_pipeline_barrier(
                self.cmd,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &mb,
                &[],
                &[],
            )
        };
        self.after_transfer = false;
        self.written.clear();
        self.read.clear();
    }

    pub(super) fn barrier(&mut self) {
        self.barrier_with(false)
    }

    /// Records a barrier first when this access conflicts with unbarriered earlier ones.
    /// `beside`: the writes go to parts of buffers that no unbarriered dispatch touches,
    /// even where one writes other parts of the same buffer, so writing after a write is
    /// no conflict.
    fn hazard(&mut self, reads: &[u64], writes: &[u64], beside: bool) {
        let conflict = reads.iter().any(|b| self.written.contains(b))
            || writes.iter().any(|b| (!beside && self.written.contains(b)) || self.read.contains(b));
        if conflict {
            self.barrier();
        }
        self.read.extend(reads);
        self.written.extend(writes);
    }

    /// One dispatch of `kernel` over `groups` workgroups; `reads` and `writes` name the
    /// buffers (by base address) it touches.
    pub(super) fn dispatch(
        &mut self,
        kernel: KernelId,
        push: Push,
        groups: [u32; 3],
        reads: &[u64],
        writes: &[u64],
    ) -> PluginResult<()> {
        self.dispatch_with(kernel, push, groups, (reads, writes), false)
    }

    /// A dispatch that writes other parts of buffers an unbarriered dispatch writes (the
    /// two halves of one result, K and V rows of the same pages): it joins the current
    /// barrier interval rather than starting a new one.
    pub(super) fn dispatch_beside(
        &mut self,
        kernel: KernelId,
        push: Push,
        groups: [u32; 3],
        reads: &[u64],
        writes: &[u64],
    ) -> PluginResult<()> {
        self.dispatch_with(kernel, push, groups, (reads, writes), true)
    }

    fn dispatch_with(
        &mut self,
        kernel: KernelId,
        push: Push,
        groups: [u32; 3],
        (reads, writes): (&[u64], &[u64]),
        beside: bool,
    ) -> PluginResult<()> {
        if groups.contains(&0) {
            return Ok(());
        }
        // Recording happens once per step shape, so the check costs nothing per step.
        if let Some(why) = crate::push_layout::mismatch(kernel.push_layout(), push.kinds()) {
            let name = kernel.name();
            return Err(PluginError::device(format!("vulkan: internal error: push constants of {name}: {why}")));
        }
        self.hazard(reads, writes, beside);
        let pipeline = self.kernels.get(self.ctx, kernel)?;
        // SAFETY: recording state; push constants fit the layout's range.
        unsafe {
            let d = &self.ctx.device;
            d.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
            d.cmd_push_constants(self.cmd, self.kernels.layout, vk::ShaderStageFlags::COMPUTE, 0, push.bytes());
            d.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
            if let Some(q) = self.profile.filter(|_| self.dispatches + 1 < crate::profile::CAPACITY) {
                d.cmd_write_timestamp(self.cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, q, self.dispatches + 1);
                self.names.push(if self.profile_grid {
                    format!("{} {}x{}x{}", kernel.name(), groups[0], groups[1], groups[2])
                } else {
                    kernel.name()
                });
            }
        }
        self.dispatches += 1;
        Ok(())
    }

    /// A one-dimensional grid of `n` workgroups, folded into y past the per-dimension limit
    /// (kernels compute `x + y · 65535`).
    pub(super) fn folded(n: u32) -> [u32; 3] {
        if n <= MAX_GROUPS {
            [n, 1, 1]
        } else {
            [MAX_GROUPS, n.div_ceil(MAX_GROUPS), 1]
        }
    }

    /// Quantizes `rows` rows of `width` f32 values at `x` into the 8-bit copy `q`.
    pub(super) fn quantize(&mut self, x: u64, q: &Q8Buf, width: u32, rows: u32) -> PluginResult<()> {
        let push = Push::default().addr(x).addr(q.qs.address).addr(q.ds.address).u32(width);
        self.dispatch(
            KernelId::QuantizeQ8,
            push,
            [(width / 32).div_ceil(64), rows, 1],
            &[x],
            &[q.qs.address, q.ds.address],
        )
    }
}
