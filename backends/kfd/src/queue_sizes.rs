//! The sizes KFD checks when it creates an AQL queue: the EOP buffer, the control stack and
//! the context-save (CWSR) area. Newer kernels publish `eop_buffer_size`, `ctl_stack_size` and
//! `cwsr_size` in the node's topology properties and refuse a queue whose sizes differ;
//! older ones do not publish them, and then zinc computes them the way the kernel does
//! (`kfd_queue_ctx_save_restore_size` in `amdkfd/kfd_queue.c`).

use std::collections::HashMap;

/// The buffers one queue needs, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSizes {
    /// End-of-pipe buffer.
    pub eop: u64,
    /// Control stack (inside the context-save area), as CREATE_QUEUE's `ctl_stack_size`.
    pub ctl_stack: u64,
    /// Context-save area per XCC, as CREATE_QUEUE's `ctx_save_restore_size`.
    pub cwsr: u64,
    /// Bytes to allocate for the context-save buffer: `(cwsr + debugger area) * XCCs`.
    pub ctx_alloc: u64,
    /// Where the numbers came from: `topology` or `computed`.
    pub source: &'static str,
}

const PAGE: u64 = 4096;
const SGPR_SIZE_PER_CU: u64 = 0x4000;
const LDS_SIZE_PER_CU: u64 = 0x10000;
const HWREG_SIZE_PER_CU: u64 = 0x1000;
const DEBUGGER_BYTES_PER_WAVE: u64 = 32;
const DEBUGGER_BYTES_ALIGN: u64 = 64;
const CONTEXT_SAVE_HEADER: u64 = 40;

fn align(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

fn vgpr_size_per_cu(gfxv: u64) -> u64 {
    match gfxv {
        90402 | 90010 | 90008 | 90500 => 0x80000,
        110000 | 110001 | 120000 | 120001 => 0x60000,
        _ => 0x40000,
    }
}

impl QueueSizes {
    /// Sizes for a node with these topology properties.
    pub fn from_properties(p: &HashMap<String, u64>) -> QueueSizes {
        let get = |k: &str| p.get(k).copied().unwrap_or(0);
        let gfxv = get("gfx_target_version");
        let xcc = get("num_xcc").max(1);
        let cu = get("simd_count") / get("simd_per_cu").max(1) / xcc;
        let waves = if gfxv < 100100 {
            let per_engine = get("array_count") / get("simd_arrays_per_engine").max(1) * 512;
            (cu * 40).min(per_engine)
        } else {
            cu * 32
        };
        let lds = if gfxv == 90500 { get("lds_size_in_kb") << 10 } else { LDS_SIZE_PER_CU };
        let wg_data = align(cu * (vgpr_size_per_cu(gfxv) + SGPR_SIZE_PER_CU + lds + HWREG_SIZE_PER_CU), PAGE);
        let per_wave = if gfxv >= 100100 { 12 } else { 8 };
        let mut ctl_stack = align(CONTEXT_SAVE_HEADER + waves * per_wave + 8, PAGE);
        if gfxv / 10000 == 10 {
            ctl_stack = ctl_stack.min(0x7000);
        }
        let debug = align(waves * DEBUGGER_BYTES_PER_WAVE, DEBUGGER_BYTES_ALIGN);
        let published = (p.get("ctl_stack_size"), p.get("cwsr_size"));
        let (ctl_stack, cwsr, source) = match published {
            (Some(&c), Some(&w)) if c > 0 && w > 0 => (c, w, "topology"),
            _ => (ctl_stack, align(ctl_stack + wg_data, PAGE), "computed"),
        };
        let eop =
            p.get("eop_buffer_size").copied().filter(|&e| e > 0).unwrap_or(if gfxv == 80002 { 0x8000 } else { PAGE });
        QueueSizes { eop, ctl_stack, cwsr, ctx_alloc: align((cwsr + debug) * xcc, PAGE), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// An RDNA3 node with 96 CUs, worked by hand from the kernel's formula: 3,072 waves;
    /// work-group data 96 × (0x60000 + 0x4000 + 0x10000 + 0x1000) = 46,006,272; control
    /// stack 40 + 3,072 × 12 + 8 = 36,912 → 40,960; debugger area 98,304.
    #[test]
    fn sizes_follow_the_kernel_formula_when_topology_does_not_publish_them() {
        let s = QueueSizes::from_properties(&props(&[
            ("gfx_target_version", 110000),
            ("simd_count", 192),
            ("simd_per_cu", 2),
        ]));
        assert_eq!(s.source, "computed");
        assert_eq!(s.ctl_stack, 40_960);
        assert_eq!(s.cwsr, 40_960 + 46_006_272);
        assert_eq!(s.ctx_alloc, 40_960 + 46_006_272 + 98_304);
        assert_eq!(s.eop, 4096);
    }

    /// gfx9 (MI200-class, 2 XCCs here): fewer waves per engine, 8 control-stack bytes per wave.
    #[test]
    fn gfx9_limits_waves_by_engines_and_scales_by_xcc() {
        let s = QueueSizes::from_properties(&props(&[
            ("gfx_target_version", 90010),
            ("simd_count", 440),
            ("simd_per_cu", 4),
            ("num_xcc", 1),
            ("array_count", 8),
            ("simd_arrays_per_engine", 1),
        ]));
        // 110 CUs: min(4,400, 8 × 512) = 4,096 waves; control stack 40 + 32,768 + 8 → 36,864.
        assert_eq!(s.ctl_stack, 36_864);
        let wg = 110 * (0x80000 + 0x4000 + 0x10000 + 0x1000);
        assert_eq!(s.cwsr, 36_864 + wg);
        let two = QueueSizes::from_properties(&props(&[
            ("gfx_target_version", 90010),
            ("simd_count", 880),
            ("simd_per_cu", 4),
            ("num_xcc", 2),
            ("array_count", 8),
            ("simd_arrays_per_engine", 1),
        ]));
        assert_eq!(two.cwsr, s.cwsr, "per-XCC size");
        assert_eq!(two.ctx_alloc, 2 * s.ctx_alloc);
    }

    #[test]
    fn published_sizes_win() {
        let s = QueueSizes::from_properties(&props(&[
            ("gfx_target_version", 110000),
            ("simd_count", 192),
            ("simd_per_cu", 2),
            ("ctl_stack_size", 0x3000),
            ("cwsr_size", 0x100000),
            ("eop_buffer_size", 0x2000),
        ]));
        assert_eq!((s.ctl_stack, s.cwsr, s.eop, s.source), (0x3000, 0x100000, 0x2000, "topology"));
        assert_eq!(s.ctx_alloc, 0x100000 + 98_304);
    }
}
