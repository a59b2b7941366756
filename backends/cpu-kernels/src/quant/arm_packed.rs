//! aarch64 kernels for the four-row interleaved layout ([`super::packed`]).
//!
//! NEON is part of every aarch64 CPU; the Armv8.2 dot-product instruction (`sdot`: four
//! i8 × i8 products summed into each i32 lane) is used where the CPU has it, detected once at
//! run time, and widening multiplies with pairwise accumulation otherwise. Each row's 16
//! quants meet the activation's matching 16 values in one 128-bit register; three pairwise
//! adds leave the four rows' sums in one register, which one multiply-add scales by the four
//! rows' scales. `sdot` is written as inline assembly because its intrinsic is not yet stable
//! in Rust. Tested on an emulated CPU (qemu-user) with and without the dot-product extension.

use super::{
    packed::{PackedKind, GROUP},
    q8::Q8Row,
};
use std::arch::aarch64::*;
use std::sync::OnceLock;

/// Which aarch64 kernel family this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// NEON only.
    Neon,
    /// NEON plus the dot-product instructions.
    DotProd,
}

/// The best level, checked once (`ZINC_CPU_NO_DOTPROD` forces plain NEON).
pub fn level() -> Level {
    static L: OnceLock<Level> = OnceLock::new();
    *L.get_or_init(|| {
        if std::arch::is_aarch64_feature_detected!("dotprod") && std::env::var_os("ZINC_CPU_NO_DOTPROD").is_none() {
            Level::DotProd
        } else {
            Level::Neon
        }
    })
}

/// Four f16 values at `p` as f32 (`fcvtl`; the f16 vector types are not stable in Rust).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f16x4(p: *const u8) -> float32x4_t {
    let bits = vld1_u16(p as *const u16);
    let out: float32x4_t;
    std::arch::asm!("fcvtl {o:v}.4s, {i:v}.4h", i = in(vreg) bits, o = out(vreg) out,
                    options(pure, nomem, nostack));
    out
}

/// acc + Σ of each lane's four i8 × i8 products (`sdot`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    std::arch::asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a,
                    b = in(vreg) b, options(pure, nomem, nostack));
    acc
}

/// acc + the same sixteen products, summed in pairs (lanes group them differently from
/// `sdot`; only the sum over all four lanes is used).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn mul_pairs(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let hi = vmull_high_s8(a, b);
    vpadalq_s16(vpadalq_s16(acc, lo), hi)
}

macro_rules! group_kernel {
    ($name:ident, $feature:literal, $mac:ident) => {
        /// One group: `out[r][j]` = row j · `a[r]`; `g` holds `blocks` group blocks.
        #[target_feature(enable = $feature)]
        pub unsafe fn $name<const BYTES: bool, const R: usize>(
            g: &[u8],
            blocks: usize,
            min_scale: f32,
            a: &[&Q8Row; R],
            out: &mut [[f32; GROUP]; R],
        ) {
            let gb = if BYTES { 136 } else { 80 };
            debug_assert!(g.len() >= blocks * gb);
            let zero = vdupq_n_s32(0);
            let mut acc = [vdupq_n_f32(0.0); R];
            let mut mins = [vdupq_n_f32(0.0); R];
            let mask = vdupq_n_u8(0x0f);
            for k in 0..blocks {
                let p = g.as_ptr().add(k * gb);
                let mut lo = [vdupq_n_s8(0); GROUP];
                let mut hi = [vdupq_n_s8(0); GROUP];
                for j in 0..GROUP {
                    if BYTES {
                        lo[j] = vld1q_s8(p.add(16 * j) as *const i8);
                        hi[j] = vld1q_s8(p.add(64 + 16 * j) as *const i8);
                    } else {
                        let x = vld1q_u8(p.add(16 * j));
                        lo[j] = vreinterpretq_s8_u8(vandq_u8(x, mask));
                        hi[j] = vreinterpretq_s8_u8(vshrq_n_u8(x, 4));
                    }
                }
                let d = f16x4(p.add(if BYTES { 128 } else { 64 }));
                let m = if BYTES { vdupq_n_f32(0.0) } else { f16x4(p.add(72)) };
                for r in 0..R {
                    let q = a[r].qs.as_ptr().add(k * 32);
                    let (alo, ahi) = (vld1q_s8(q), vld1q_s8(q.add(16)));
                    let s: [int32x4_t; GROUP] = std::array::from_fn(|j| $mac($mac(zero, lo[j], alo), hi[j], ahi));
                    let rows = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
                    acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(rows), vmulq_n_f32(d, *a[r].d.get_unchecked(k)));
                    if !BYTES {
                        mins[r] = vfmaq_n_f32(mins[r], m, *a[r].s.get_unchecked(k));
                    }
                }
            }
            for r in 0..R {
                vst1q_f32(out[r].as_mut_ptr(), vfmaq_n_f32(acc[r], mins[r], min_scale));
            }
        }
    };
}

group_kernel!(group_dotprod, "neon,dotprod", sdot);
group_kernel!(group_neon, "neon", mul_pairs);

/// Runs one group on the best kernel for this CPU: `true`, except for Q5's layout, which is
/// not packed on aarch64 (`Packed::pack`) and has no kernel here (the plain code serves it).
#[inline]
pub fn dot_group<const R: usize>(
    kind: PackedKind,
    g: &[u8],
    blocks: usize,
    a: &[&Q8Row; R],
    out: &mut [[f32; GROUP]; R],
) -> bool {
    super::packed::Packed::check_lengths(kind, g, blocks, a);
    // SAFETY: NEON is part of aarch64; `level` checked the dot-product extension; lengths
    // checked above.
    unsafe {
        match (level(), kind) {
            (Level::DotProd, PackedKind::Nibbles { min_scale }) => {
                group_dotprod::<false, R>(g, blocks, min_scale, a, out)
            }
            (Level::DotProd, PackedKind::Bytes) => group_dotprod::<true, R>(g, blocks, 0.0, a, out),
            (Level::Neon, PackedKind::Nibbles { min_scale }) => group_neon::<false, R>(g, blocks, min_scale, a, out),
            (Level::Neon, PackedKind::Bytes) => group_neon::<true, R>(g, blocks, 0.0, a, out),
            (_, PackedKind::Nibbles5 { .. }) => return false,
        }
    }
    true
}
