//! The model on the device: every weight tensor uploaded once through a staging buffer and
//! kept in its GGUF block format (32-element blocks regrouped, block_layout.rs); norm weights
//! also as f32 vectors; RoPE frequencies.

use crate::{
    block_layout::{device_row_bytes, rewritten_on_upload, write_device_rows},
    buffer::{GpuBuffer, Place},
    catalogue::KernelId,
    context::{vk_err, Context},
};
use ash::vk;
use std::collections::HashMap;
use zinc_formats::{dequant::dequantize_row, GgmlType};
use zinc_plugin_api::{Hparams, ModelProgram, Op, PluginError, PluginResult, RopeFreqs, TensorDesc};

/// Bytes of the staging buffer weights pass through.
const STAGING_BYTES: u64 = 64 << 20;
/// Bytes of regrouped rows written to the staging buffer at a time.
const CHUNK_BYTES: u64 = 16 << 20;

/// One weight tensor on the device.
pub struct DeviceTensor {
    /// The bytes: the GGUF file's blocks, in the device layout of block_layout.rs.
    pub buf: GpuBuffer,
    /// Storage type.
    pub dtype: GgmlType,
    /// Elements per row.
    pub row_len: u32,
    /// Bytes per row on the device (block_layout::device_row_bytes).
    pub row_bytes: u32,
    /// Rows per expert for 3-D expert tensors (`dims[1]`), else all rows.
    pub rows_per_matrix: u32,
}

impl DeviceTensor {
    /// Bytes of one expert's matrix, which the expert kernels multiply by an expert id in 32
    /// bits: a clear error for an expert of 4 GiB or more rather than a wrong address.
    pub fn expert_bytes(&self) -> PluginResult<u32> {
        self.rows_per_matrix.checked_mul(self.row_bytes).ok_or_else(|| {
            PluginError::unsupported(format!(
                "vulkan: an expert matrix of {} rows of {} bytes is 4 GiB or more; the expert kernels address experts in 32 bits",
                self.rows_per_matrix, self.row_bytes
            ))
        })
    }
}

/// The uploaded model.
pub struct Weights {
    /// Per tensor of the program: uploaded when a kernel reads it in block format.
    pub tensors: Vec<Option<DeviceTensor>>,
    /// Norm weights as f32, by tensor id.
    pub vectors: HashMap<u32, GpuBuffer>,
    /// RoPE inverse frequencies: the global base's, then the local base's (sliding-window
    /// layers), `rope_dim / 2` each; see [`Weights::inv_freq`].
    inv_freq: GpuBuffer,
    /// Bytes uploaded.
    pub bytes: u64,
}

/// Where a tensor goes on the device: its blocks (products and embeddings read them), an f32
/// vector (norms read it), or both.
#[derive(Clone, Copy)]
struct Placement {
    shape: FileShape,
    as_blocks: bool,
    as_vector: bool,
}

/// A tensor's type and row shape in the file, checked.
#[derive(Clone, Copy)]
struct FileShape {
    dtype: GgmlType,
    row_bytes: u32,
    row_len: u32,
}

fn check_tensor(t: &TensorDesc) -> PluginResult<FileShape> {
    let name = t.name.as_str();
    let ty = GgmlType::try_from(t.dtype.0).ok().filter(|&ty| KernelId::Embed(ty).is_built()).ok_or_else(|| {
        PluginError::unsupported(format!("tensor {name}: type id {} has no vulkan kernel", t.dtype.0))
    })?;
    let rb = ty.row_bytes(t.row_len()).ok_or_else(|| {
        PluginError::invalid(format!("tensor {name}: rows of {} {ty} elements are not whole blocks", t.row_len()))
    })?;
    if (rb as u64).checked_mul(t.rows() as u64) != Some(t.len as u64) || t.data.is_null() {
        return Err(PluginError::invalid(format!(
            "tensor {name}: {} bytes do not match its shape {:?}",
            t.len, t.dims
        )));
    }
    let (row_bytes, row_len) = u32::try_from(rb).ok().zip(u32::try_from(t.row_len()).ok()).ok_or_else(|| {
        PluginError::invalid(format!("tensor {name}: rows of {} bytes are too long for the kernels", rb))
    })?;
    Ok(FileShape { dtype: ty, row_bytes, row_len })
}

/// Copies host bytes into device buffers through one staging buffer, several tensors per
/// submission.
struct Uploader {
    staging: GpuBuffer,
    used: u64,
    copies: Vec<(vk::Buffer, vk::BufferCopy)>,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    total: u64,
    done: u64,
    next_report: u64,
}

impl Uploader {
    fn new(ctx: &mut Context, total: u64) -> PluginResult<Uploader> {
        let staging = GpuBuffer::new(ctx, "weight staging", STAGING_BYTES.min(total.max(16)), Place::Upload)?;
        let cmd = ctx.command_buffer()?;
        let fence = ctx.fence()?;
        Ok(Uploader { staging, used: 0, copies: Vec::new(), cmd, fence, total, done: 0, next_report: 1 << 30 })
    }

    /// Queues a copy of `bytes` to `dst` at byte `dst_off`.
    fn push(&mut self, ctx: &mut Context, dst: &GpuBuffer, mut dst_off: u64, mut bytes: &[u8]) -> PluginResult<()> {
        while !bytes.is_empty() {
            if self.used == self.staging.size {
                self.flush(ctx)?;
            }
            let n = (self.staging.size - self.used).min(bytes.len() as u64) as usize;
            let at = self.used as usize;
            self.staging.mapped()[at..at + n].copy_from_slice(&bytes[..n]);
            self.copies
                .push((dst.buffer, vk::BufferCopy { src_offset: self.used, dst_offset: dst_off, size: n as u64 }));
            self.used += n as u64;
            dst_off += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Queues `len` bytes (at most the staging buffer's size) that `fill` writes straight into
    /// the staging buffer, to `dst` at byte `dst_off`.
    fn push_filled(
        &mut self,
        ctx: &mut Context,
        dst: &GpuBuffer,
        dst_off: u64,
        len: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> PluginResult<()> {
        debug_assert!(len <= self.staging.size);
        if self.staging.size - self.used < len {
            self.flush(ctx)?;
        }
        let at = self.used as usize;
        fill(&mut self.staging.mapped()[at..at + len as usize]);
        self.copies.push((dst.buffer, vk::BufferCopy { src_offset: self.used, dst_offset: dst_off, size: len }));
        self.used += len;
        Ok(())
    }

    fn flush(&mut self, ctx: &mut Context) -> PluginResult<()> {
        if self.copies.is_empty() {
            return Ok(());
        }
        // SAFETY: the command buffer is idle (every submission is waited for); regions lie
        // inside the staging buffer and their destinations, which were sized for them.
        unsafe {
            let d = &ctx.device;
            d.begin_command_buffer(
                self.cmd,
                &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .map_err(vk_err("recording an upload"))?;
            for (dst, region) in &self.copies {
                d.cmd_copy_buffer(self.cmd, self.staging.buffer, *dst, std::slice::from_ref(region));
            }
            d.end_command_buffer(self.cmd).map_err(vk_err("recording an upload"))?;
        }
        ctx.submit_and_wait(self.cmd, self.fence)?;
        self.done += self.used;
        if self.total >= 1 << 30 && self.done >= self.next_report {
            eprintln!("vulkan: uploaded {} of {} MiB of weights", self.done >> 20, self.total >> 20);
            self.next_report += 1 << 30;
        }
        self.copies.clear();
        self.used = 0;
        Ok(())
    }

    fn finish(mut self, ctx: &mut Context) -> PluginResult<()> {
        let r = self.flush(ctx);
        // SAFETY: waited for in flush; freed once.
        unsafe {
            ctx.device.free_command_buffers(ctx.pool, &[self.cmd]);
            ctx.device.destroy_fence(self.fence, None);
        }
        self.staging.free(ctx);
        r
    }
}

impl Weights {
    /// Address of the RoPE inverse frequencies of `freqs`.
    pub fn inv_freq(&self, freqs: RopeFreqs, hp: &Hparams) -> u64 {
        match freqs {
            RopeFreqs::Global => self.inv_freq.address,
            RopeFreqs::Local => self.inv_freq.address + (hp.rope_dim / 2) as u64 * 4,
        }
    }

    /// Uploads what the program's ops read. On error everything allocated so far is freed.
    pub fn upload(ctx: &mut Context, program: &ModelProgram) -> PluginResult<Weights> {
        let mut as_vector = vec![false; program.tensors.len()];
        let mut as_blocks = vec![false; program.tensors.len()];
        for op in program.ops.iter() {
            match *op {
                Op::RmsNorm { weight, .. } | Op::HeadRmsNorm { weight, .. } | Op::AddBias { bias: weight, .. } => {
                    as_vector[weight as usize] = true
                }
                Op::Embed { table: t, .. } | Op::MatMul { weight: t, .. } => as_blocks[t as usize] = true,
                Op::Moe { router, gate_exps, up_exps, down_exps, .. } => {
                    for t in [router, gate_exps, up_exps, down_exps] {
                        as_blocks[t as usize] = true;
                    }
                }
                _ => {}
            }
        }
        let mut placements = Vec::new();
        for (i, t) in program.tensors.iter().enumerate() {
            placements.push(if as_blocks[i] || as_vector[i] {
                Some(Placement { shape: check_tensor(t)?, as_blocks: as_blocks[i], as_vector: as_vector[i] })
            } else {
                None
            });
        }
        // Bytes on the device (rows of the regrouped formats are padded to whole groups).
        let total: u64 = program
            .tensors
            .iter()
            .zip(&placements)
            .filter_map(|(t, p)| p.filter(|p| p.as_blocks).map(|p| (t, p.shape)))
            .map(|(t, s)| device_row_bytes(s.dtype, s.row_bytes as usize) as u64 * t.rows() as u64)
            .sum();
        let mut inv = program.hparams.rope_inv_freq(RopeFreqs::Global);
        inv.extend(program.hparams.rope_inv_freq(RopeFreqs::Local));
        let mut w = Weights {
            tensors: Vec::new(),
            vectors: HashMap::new(),
            inv_freq: GpuBuffer::new(ctx, "rope frequencies", (inv.len() * 4) as u64, Place::Device)?,
            bytes: 0,
        };
        let mut up = match Uploader::new(ctx, total) {
            Ok(u) => u,
            Err(e) => {
                w.free(ctx);
                return Err(e);
            }
        };
        let r = w.fill(ctx, &mut up, program, &placements, &inv);
        let r = r.and_then(|_| up.finish(ctx));
        match r {
            Ok(()) => Ok(w),
            Err(e) => {
                // SAFETY: nothing is in flight after a failed or finished upload.
                unsafe {
                    let _ = ctx.device.device_wait_idle();
                }
                w.free(ctx);
                Err(e)
            }
        }
    }

    fn fill(
        &mut self,
        ctx: &mut Context,
        up: &mut Uploader,
        program: &ModelProgram,
        placements: &[Option<Placement>],
        inv: &[f32],
    ) -> PluginResult<()> {
        up.push(ctx, &self.inv_freq, 0, &f32_bytes(inv))?;
        for (i, t) in program.tensors.iter().enumerate() {
            // SAFETY: the host keeps the program's tensors mapped while the backend loads.
            let bytes = unsafe { t.bytes() };
            let Some(Placement { shape: FileShape { dtype, row_bytes: rb, row_len }, as_blocks, as_vector }) =
                placements[i]
            else {
                self.tensors.push(None);
                continue;
            };
            if as_vector {
                let mut v = vec![0f32; t.row_len() * t.rows()];
                for (r, out) in v.chunks_exact_mut(t.row_len()).enumerate() {
                    dequantize_row(dtype, &bytes[r * rb as usize..(r + 1) * rb as usize], out);
                }
                let buf = GpuBuffer::new(ctx, t.name.as_str(), (v.len() * 4) as u64, Place::Device)?;
                let r = up.push(ctx, &buf, 0, &f32_bytes(&v));
                self.vectors.insert(i as u32, buf);
                r?;
            }
            if !as_blocks {
                self.tensors.push(None);
                continue;
            }
            let dev_rb = device_row_bytes(dtype, rb as usize);
            let dev_len = dev_rb as u64 * t.rows() as u64;
            let dev_rb = u32::try_from(dev_rb).map_err(|_| {
                PluginError::invalid(format!("tensor {}: rows of {dev_rb} bytes are too long for the kernels", t.name))
            })?;
            // 16 bytes of slack: branch-free kernels read one word past a block they need half of.
            let buf = GpuBuffer::new(ctx, t.name.as_str(), dev_len + 16, Place::Device)?;
            let rows_per_matrix = if t.dims.len() == 3 { t.dims[1] as u32 } else { t.rows() as u32 };
            let r = push_device_rows(ctx, up, &buf, dtype, bytes, rb as usize);
            self.tensors.push(Some(DeviceTensor { buf, dtype, row_len, row_bytes: dev_rb, rows_per_matrix }));
            r?;
            self.bytes += dev_len;
        }
        Ok(())
    }

    /// The device tensor `t` (uploaded in block format).
    pub fn tensor(&self, t: u32) -> &DeviceTensor {
        self.tensors[t as usize].as_ref().expect("tensor uploaded for the ops that read it")
    }

    /// Frees every buffer.
    pub fn free(self, ctx: &mut Context) {
        for t in self.tensors.into_iter().flatten() {
            t.buf.free(ctx);
        }
        for (_, b) in self.vectors {
            b.free(ctx);
        }
        self.inv_freq.free(ctx);
    }
}

/// A tensor's rows in the device layout, regrouped straight into the staging buffer a few MiB
/// at a time.
fn push_device_rows(
    ctx: &mut Context,
    up: &mut Uploader,
    dst: &GpuBuffer,
    dtype: GgmlType,
    bytes: &[u8],
    row_bytes: usize,
) -> PluginResult<()> {
    if !rewritten_on_upload(dtype) {
        return up.push(ctx, dst, 0, bytes);
    }
    let dev_row = device_row_bytes(dtype, row_bytes);
    let rows_per_chunk = (CHUNK_BYTES.min(up.staging.size) as usize) / dev_row;
    if rows_per_chunk == 0 {
        return Err(PluginError::unsupported(format!(
            "vulkan: a weight row of {dev_row} bytes does not fit the {} MiB staging buffer",
            up.staging.size >> 20
        )));
    }
    let mut dst_off = 0u64;
    for chunk in bytes.chunks(rows_per_chunk * row_bytes) {
        let len = (chunk.len() / row_bytes * dev_row) as u64;
        up.push_filled(ctx, dst, dst_off, len, |out| write_device_rows(dtype, chunk, row_bytes, out))?;
        dst_off += len;
    }
    Ok(())
}

/// f32 values as little-endian bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
