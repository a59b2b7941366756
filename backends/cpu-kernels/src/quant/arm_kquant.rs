//! aarch64 kernels for K-quant rows (Q2_K to Q6_K) and IQ4_XS rows against up to eight 8-bit
//! super-block activation rows ([`Q8KRow`]); each weight super-block is unpacked once per pass.
//!
//! Every format unpacks a super-block into the shape [`super::kquant`] describes, here as
//! sixteen vectors of 16 signed 8-bit weights (one per run of 16 elements; the fixed offsets of
//! Q3_K and Q6_K applied, IQ4_XS's table looked up), an integer scale per run, and for Q2_K,
//! Q4_K and Q5_K a minimum per run. One shared loop takes each run's sixteen products into four
//! 32-bit lanes (`sdot` where the CPU has the dot-product extension, widening multiplies with
//! pairwise adds otherwise: [`super::arm_packed`]'s two families), multiplies them by the
//! run's scale, and converts to float once per super-block; the minimums come off with the
//! activation's per-16 sums. Tested on emulated CPUs with and without the extension
//! (`scripts/test-aarch64.sh`).

use super::arm_packed::{level, mul_pairs, sdot, Level};
use super::q8k::{Q8KRow, QK_K};
use std::arch::aarch64::*;
use zinc_formats::{
    blocks::*,
    dequant::{scale_min_k4, IQ4_VALUES},
    GgmlType,
};

/// Runs of 16 elements in a super-block.
const RUNS: usize = QK_K / 16;

/// A K-quant super-block unpacked for the shared loop.
struct Unpacked {
    /// Run `j`'s weights (elements `16j..16j+16`), offsets applied.
    q: [int8x16_t; RUNS],
    /// Scale per run.
    scales: [i32; RUNS],
    /// Minimum per run (zero for the formats without).
    mins: [i16; RUNS],
    /// Factor of the scales.
    d: f32,
    /// Factor of the minimums (0 for the formats without).
    dmin: f32,
}

/// Bytes of `x` shifted right by `s` bits, masked with `mask`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn bits(x: uint8x16_t, s: usize, mask: u8) -> uint8x16_t {
    vandq_u8(vshlq_u8(x, vdupq_n_s8(-(s as i8))), vdupq_n_u8(mask))
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn load(p: &[u8]) -> uint8x16_t {
    debug_assert!(p.len() >= 16);
    vld1q_u8(p.as_ptr())
}

/// Unsigned values below 128 as signed bytes, less `offset`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn signed(x: uint8x16_t, offset: i8) -> int8x16_t {
    vsubq_s8(vreinterpretq_s8_u8(x), vdupq_n_s8(offset))
}

fn empty() -> Unpacked {
    // SAFETY: NEON is part of every aarch64 CPU.
    Unpacked { q: [unsafe { vdupq_n_s8(0) }; RUNS], scales: [0; RUNS], mins: [0; RUNS], d: 0.0, dmin: 0.0 }
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q2_k(b: &BlockQ2K) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), dmin: b.dmin.to_f32(), ..empty() };
    for (j, &sc) in b.scales.iter().enumerate() {
        u.scales[j] = (sc & 0xf) as i32;
        u.mins[j] = (sc >> 4) as i16;
    }
    // Element 128n + 32s + m is bits 2s of qs[32n + m].
    for n in 0..2 {
        for h in 0..2 {
            let x = load(&b.qs[32 * n + 16 * h..]);
            for s in 0..4 {
                u.q[8 * n + 2 * s + h] = signed(bits(x, 2 * s, 3), 0);
            }
        }
    }
    u
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q3_k(b: &BlockQ3K) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), ..empty() };
    let sc = &b.scales;
    for j in 0..RUNS {
        let low = if j < 8 { sc[j] & 0xf } else { sc[j - 8] >> 4 };
        let high = (sc[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        u.scales[j] = (low | (high << 4)) as i32 - 32;
    }
    // Two low bits as Q2_K; the third (bit 4n + s of hmask[m]) set means no offset of −4.
    for n in 0..2 {
        for h in 0..2 {
            let (x, hm) = (load(&b.qs[32 * n + 16 * h..]), load(&b.hmask[16 * h..]));
            for s in 0..4 {
                let q = vorrq_u8(bits(x, 2 * s, 3), vshlq_n_u8::<2>(bits(hm, 4 * n + s, 1)));
                u.q[8 * n + 2 * s + h] = signed(q, 4);
            }
        }
    }
    u
}

/// Q4_K and Q5_K (which adds a fifth bit per element in `qh`).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn q45_k(d: Half, dmin: Half, sc: &[u8; 12], qs: &[u8; 128], qh: Option<&[u8; 32]>) -> Unpacked {
    let mut u = Unpacked { d: d.to_f32(), dmin: dmin.to_f32(), ..empty() };
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, sc);
        u.scales[2 * j..2 * j + 2].fill(s as i32);
        u.mins[2 * j..2 * j + 2].fill(m as i16);
    }
    // Element 64k + 32·half + l is nibble `half` of qs[32k + l], its fifth bit bit 2k + half
    // of qh[l].
    for k in 0..4 {
        for h in 0..2 {
            let x = load(&qs[32 * k + 16 * h..]);
            for half in 0..2 {
                let mut q = bits(x, 4 * half, 0xf);
                if let Some(qh) = qh {
                    q = vorrq_u8(q, vshlq_n_u8::<4>(bits(load(&qh[16 * h..]), 2 * k + half, 1)));
                }
                u.q[4 * k + 2 * half + h] = signed(q, 0);
            }
        }
    }
    u
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn q6_k(b: &BlockQ6K) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), ..empty() };
    for (j, &sc) in b.scales.iter().enumerate() {
        u.scales[j] = sc as i32;
    }
    // Element 128n + 32·quarter + l: low nibble from ql[64n + 32(quarter & 1) + l] (high nibble
    // for quarters 2 and 3), two high bits 2·quarter of qh[32n + l]; q − 32.
    for n in 0..2 {
        for h in 0..2 {
            let hb = load(&b.qh[32 * n + 16 * h..]);
            for quarter in 0..4 {
                let low = bits(load(&b.ql[64 * n + 32 * (quarter & 1) + 16 * h..]), 4 * (quarter >> 1), 0xf);
                let q = vorrq_u8(low, vshlq_n_u8::<4>(bits(hb, 2 * quarter, 3)));
                u.q[8 * n + 2 * quarter + h] = signed(q, 32);
            }
        }
    }
    u
}

/// IQ4_XS: signed table values, a scale per 32 elements, no minimum.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn iq4_xs(b: &BlockIQ4XS) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), ..empty() };
    let table = vld1q_s8(IQ4_VALUES.as_ptr());
    for ib in 0..8 {
        u.scales[2 * ib..2 * ib + 2].fill(b.scale(ib));
        // Elements 0..16 of the sub-block are the low nibbles, 16..32 the high ones.
        let x = load(&b.qs[16 * ib..]);
        u.q[2 * ib] = vqtbl1q_s8(table, bits(x, 0, 0xf));
        u.q[2 * ib + 1] = vqtbl1q_s8(table, bits(x, 4, 0xf));
    }
    u
}

/// The shared loop for one kernel family; `$mac` adds a run's sixteen products to four 32-bit
/// lanes.
macro_rules! rows_kernel {
    ($name:ident, $feature:literal, $mac:ident) => {
        /// One row of super-blocks (`size` bytes each, unpacked by `unpack`) · R rows.
        #[target_feature(enable = $feature)]
        unsafe fn $name<const R: usize>(
            w: &[u8],
            size: usize,
            unpack: impl Fn(&[u8]) -> Unpacked,
            a: &[&Q8KRow; R],
            out: &mut [f32; R],
        ) {
            let mut acc = [0f32; R];
            let zero = vdupq_n_s32(0);
            for (i, b) in w.chunks_exact(size).enumerate() {
                let u = unpack(b);
                let (mins_lo, mins_hi) = (vld1q_s16(u.mins.as_ptr()), vld1q_s16(u.mins.as_ptr().add(8)));
                for r in 0..R {
                    let qa = a[r].qs.as_ptr().add(i * QK_K);
                    let mut sum = zero;
                    for j in 0..RUNS {
                        let run = $mac(zero, u.q[j], vld1q_s8(qa.add(16 * j)));
                        sum = vmlaq_n_s32(sum, run, u.scales[j]);
                    }
                    let bs = a[r].bsums.as_ptr().add(16 * i);
                    let (b_lo, b_hi) = (vld1q_s16(bs), vld1q_s16(bs.add(8)));
                    let mut m = vmull_s16(vget_low_s16(mins_lo), vget_low_s16(b_lo));
                    m = vmlal_high_s16(m, mins_lo, b_lo);
                    m = vmlal_s16(m, vget_low_s16(mins_hi), vget_low_s16(b_hi));
                    m = vmlal_high_s16(m, mins_hi, b_hi);
                    let da = *a[r].d.get_unchecked(i);
                    acc[r] += da * (u.d * vaddvq_s32(sum) as f32 - u.dmin * vaddvq_s32(m) as f32);
                }
            }
            *out = acc;
        }
    };
}

rows_kernel!(rows_dotprod, "neon,dotprod", sdot);
rows_kernel!(rows_neon, "neon", mul_pairs);

/// The unpacker of type `ty`, or None for types without these kernels.
fn unpacker(ty: GgmlType) -> Option<fn(&[u8]) -> Unpacked> {
    use GgmlType::*;
    // SAFETY (each): NEON is part of every aarch64 CPU; `block_at` checks the length.
    Some(match ty {
        Q2_K => |b| unsafe { q2_k(block_at(b)) },
        Q3_K => |b| unsafe { q3_k(block_at(b)) },
        Q4_K => |b| {
            let b: &BlockQ4K = block_at(b);
            unsafe { q45_k(b.d, b.dmin, &b.scales, &b.qs, None) }
        },
        Q5_K => |b| {
            let b: &BlockQ5K = block_at(b);
            unsafe { q45_k(b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh)) }
        },
        Q6_K => |b| unsafe { q6_k(block_at(b)) },
        IQ4_XS => |b| unsafe { iq4_xs(block_at(b)) },
        _ => return None,
    })
}

/// K-quant (or IQ4_XS) row of type `ty` · R activation rows on the best kernel for this CPU;
/// `false` for other types (the caller then uses the plain version).
pub fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Q8KRow; R], out: &mut [f32; R]) -> bool {
    let Some(unpack) = unpacker(ty) else { return false };
    let size = ty.block_bytes();
    let blocks = w.len() / size;
    assert!(a.iter().all(|r| r.qs.len() >= blocks * QK_K && r.bsums.len() >= blocks * RUNS && r.d.len() >= blocks));
    // SAFETY: NEON is part of aarch64; `level` checked the dot-product extension; every
    // activation row holds at least the weight row's super-blocks (checked above).
    unsafe {
        match level() {
            Level::DotProd => rows_dotprod(w, size, unpack, a, out),
            Level::Neon => rows_neon(w, size, unpack, a, out),
        }
    }
    true
}
