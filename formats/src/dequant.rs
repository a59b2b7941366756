//! Plain reference dequantization of every block format, ported from the ggml block layouts
//! (`shared/reference/gguf-and-blocks.md`). These are the oracle the fast paths are tested
//! against, and they are themselves checked against the `gguf` Python package's dequantizer.

use crate::{
    blocks::*,
    half::{bf16_to_f32, read_f16},
    GgmlType,
};

/// Dequantizes one row. `bytes` must hold exactly the row; `out.len()` elements are written.
/// Returns false when the lengths disagree.
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    if ty.row_bytes(out.len()) != Some(bytes.len()) {
        return false;
    }
    use GgmlType::*;
    match ty {
        F32 => scalars(bytes, out, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        F16 => scalars(bytes, out, read_f16),
        BF16 => scalars(bytes, out, |b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        Q4_0 => each(bytes, out, q4_0),
        Q4_1 => each(bytes, out, q4_1),
        Q5_0 => each(bytes, out, q5_0),
        Q5_1 => each(bytes, out, q5_1),
        Q8_0 => each(bytes, out, q8_0),
        Q2_K => each(bytes, out, q2_k),
        Q3_K => each(bytes, out, q3_k),
        Q4_K => each(bytes, out, q4_k),
        Q5_K => each(bytes, out, q5_k),
        Q6_K => each(bytes, out, q6_k),
        Q8_K => each(bytes, out, q8_k),
        IQ4_NL => each(bytes, out, iq4_nl),
        IQ4_XS => each(bytes, out, iq4_xs),
    }
    true
}

/// Runs `f` on each block of `bytes` and the elements it fills.
fn each<B: Block>(bytes: &[u8], out: &mut [f32], f: fn(&B, &mut [f32])) {
    let blocks = as_blocks::<B>(bytes).expect("lengths checked by the caller");
    let per = out.len() / blocks.len().max(1);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(per)) {
        f(b, y);
    }
}

/// One element per `size_of(element)` bytes.
fn scalars(bytes: &[u8], out: &mut [f32], f: impl Fn(&[u8]) -> f32) {
    let size = bytes.len() / out.len().max(1);
    for (b, y) in bytes.chunks_exact(size).zip(out) {
        *y = f(b);
    }
}

fn q4_0(b: &BlockQ4_0, y: &mut [f32]) {
    let (d, qs) = (b.d.to_f32(), &b.qs);
    for j in 0..16 {
        y[j] = ((qs[j] & 0xf) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(b: &BlockQ4_1, y: &mut [f32]) {
    let (d, m, qs) = (b.d.to_f32(), b.m.to_f32(), &b.qs);
    for j in 0..16 {
        y[j] = (qs[j] & 0xf) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

fn q5_0(b: &BlockQ5_0, y: &mut [f32]) {
    let (d, qh, qs) = (b.d.to_f32(), u32::from_le_bytes(b.qh), &b.qs);
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = (((qs[j] & 0xf) as u32 | h0) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
    }
}

fn q5_1(b: &BlockQ5_1, y: &mut [f32]) {
    let (d, m) = (b.d.to_f32(), b.m.to_f32());
    let (qh, qs) = (u32::from_le_bytes(b.qh), &b.qs);
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = ((qs[j] & 0xf) as u32 | h0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
    }
}

fn q8_0(b: &BlockQ8_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (y, &q) in y.iter_mut().zip(&b.qs) {
        *y = q as f32 * d;
    }
}

fn q2_k(b: &BlockQ2K, y: &mut [f32]) {
    let (scales, qs) = (&b.scales, &b.qs);
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    let mut out = 0;
    let mut is = 0;
    for n in 0..2 {
        let q = &qs[n * 32..n * 32 + 32];
        for shift in [0u32, 2, 4, 6] {
            for half in 0..2 {
                let sc = scales[is];
                is += 1;
                let (dl, ml) = (d * (sc & 0xf) as f32, dmin * (sc >> 4) as f32);
                for l in 0..16 {
                    y[out] = dl * ((q[l + 16 * half] >> shift) & 3) as f32 - ml;
                    out += 1;
                }
            }
        }
    }
}

/// The 16 signed 6-bit scales of a Q3_K block, unpacked from 12 bytes.
fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for j in 0..16 {
        let low = if j < 8 { s[j] & 0xf } else { s[j - 8] >> 4 };
        let high = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        out[j] = ((low | (high << 4)) as i32 - 32) as i8;
    }
    out
}

fn q3_k(b: &BlockQ3K, y: &mut [f32]) {
    let (hmask, qs) = (&b.hmask, &b.qs);
    let scales = q3_k_scales(&b.scales);
    let d = b.d.to_f32();
    let mut out = 0;
    let mut is = 0;
    let mut m = 1u8;
    for n in 0..2 {
        let q = &qs[n * 32..n * 32 + 32];
        for shift in [0u32, 2, 4, 6] {
            for half in 0..2 {
                let dl = d * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let i = l + 16 * half;
                    let v = ((q[i] >> shift) & 3) as i32 - if hmask[i] & m != 0 { 0 } else { 4 };
                    y[out] = dl * v as f32;
                    out += 1;
                }
            }
            m <<= 1;
        }
    }
}

/// Scale and min of sub-block `j` (0..8) from the 12-byte K-quant scale field.
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

fn q4_k(b: &BlockQ4K, y: &mut [f32]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    let (scales, qs) = (&b.scales, &b.qs);
    for k in 0..4 {
        let (s1, m1) = scale_min_k4(2 * k, scales);
        let (s2, m2) = scale_min_k4(2 * k + 1, scales);
        let q = &qs[32 * k..32 * k + 32];
        let y = &mut y[64 * k..64 * k + 64];
        for l in 0..32 {
            y[l] = d * s1 as f32 * (q[l] & 0xf) as f32 - dmin * m1 as f32;
            y[l + 32] = d * s2 as f32 * (q[l] >> 4) as f32 - dmin * m2 as f32;
        }
    }
}

fn q5_k(b: &BlockQ5K, y: &mut [f32]) {
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    let (scales, qh, qs) = (&b.scales, &b.qh, &b.qs);
    for k in 0..4 {
        let (s1, m1) = scale_min_k4(2 * k, scales);
        let (s2, m2) = scale_min_k4(2 * k + 1, scales);
        let (u1, u2) = (1u8 << (2 * k), 2u8 << (2 * k));
        let q = &qs[32 * k..32 * k + 32];
        let y = &mut y[64 * k..64 * k + 64];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d * s1 as f32 * ((q[l] & 0xf) + h1) as f32 - dmin * m1 as f32;
            y[l + 32] = d * s2 as f32 * ((q[l] >> 4) + h2) as f32 - dmin * m2 as f32;
        }
    }
}

fn q6_k(b: &BlockQ6K, y: &mut [f32]) {
    let (ql, qh, sc) = (&b.ql[..], &b.qh[..], &b.scales[..]);
    let d = b.d.to_f32();
    for n in 0..2 {
        let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
        let y = &mut y[128 * n..128 * n + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * sc[is] as f32 * q1 as f32;
            y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
            y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
            y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
        }
    }
}

fn q8_k(b: &BlockQ8K, y: &mut [f32]) {
    let d = f32::from_le_bytes(b.d);
    for (y, &q) in y.iter_mut().zip(&b.qs) {
        *y = q as f32 * d;
    }
}

/// The 16 values a 4-bit index of IQ4_NL and IQ4_XS stands for (ggml's `kvalues_iq4nl`).
pub const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// 32 values from 16 bytes of 4-bit indices (low nibbles first, then high), times `d`.
fn iq4_run(qs: &[u8], d: f32, y: &mut [f32]) {
    for j in 0..16 {
        y[j] = d * IQ4_VALUES[(qs[j] & 0xf) as usize] as f32;
        y[j + 16] = d * IQ4_VALUES[(qs[j] >> 4) as usize] as f32;
    }
}

fn iq4_nl(b: &BlockIQ4NL, y: &mut [f32]) {
    iq4_run(&b.qs, b.d.to_f32(), y);
}

impl BlockIQ4XS {
    /// The signed 6-bit scale of 32-element sub-block `ib`.
    pub fn scale(&self, ib: usize) -> i32 {
        let scales_h = u16::from_le_bytes(self.scales_h);
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        (low | (high << 4)) as i32 - 32
    }
}

fn iq4_xs(b: &BlockIQ4XS, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (ib, (qs, y)) in b.qs.chunks_exact(16).zip(y.chunks_exact_mut(32)).enumerate() {
        iq4_run(qs, d * b.scale(ib) as f32, y);
    }
}
