//! Plain reference dequantization of every block format, ported from the ggml block layouts
//! (`shared/reference/gguf-and-blocks.md`). These are the oracle the fast paths are tested
//! against, and they are themselves checked against the `gguf` Python package's dequantizer.

use crate::{
    half::{bf16_to_f32, read_f16},
    ids::*,
};

/// Dequantizes one row. `bytes` must hold exactly the row; `out.len()` elements are written.
/// Returns false when the type is unsupported or the lengths disagree.
pub fn dequantize_row(ty: u32, bytes: &[u8], out: &mut [f32]) -> bool {
    let Some(expected) = crate::row_bytes(ty, out.len()) else { return false };
    if bytes.len() != expected {
        return false;
    }
    let Some((block, size)) = crate::block_layout(ty) else { return false };
    for (b, y) in bytes.chunks_exact(size).zip(out.chunks_exact_mut(block)) {
        match ty {
            F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            F16 => y[0] = read_f16(b),
            BF16 => y[0] = bf16_to_f32(u16::from_le_bytes([b[0], b[1]])),
            Q4_0 => q4_0(b, y),
            Q4_1 => q4_1(b, y),
            Q5_0 => q5_0(b, y),
            Q5_1 => q5_1(b, y),
            Q8_0 => q8_0(b, y),
            Q8_1 => q8_1(b, y),
            Q2_K => q2_k(b, y),
            Q3_K => q3_k(b, y),
            Q4_K => q4_k(b, y),
            Q5_K => q5_k(b, y),
            Q6_K => q6_k(b, y),
            Q8_K => q8_k(b, y),
            IQ4_NL => iq4_nl(b, y),
            IQ4_XS => iq4_xs(b, y),
            _ => return false,
        }
    }
    true
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = read_f16(b);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 0xf) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (read_f16(b), read_f16(&b[2..]));
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0xf) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = read_f16(b);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = (((qs[j] & 0xf) as u32 | h0) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (read_f16(b), read_f16(&b[2..]));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = ((qs[j] & 0xf) as u32 | h0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = read_f16(b);
    for j in 0..32 {
        y[j] = b[2 + j] as i8 as f32 * d;
    }
}

fn q8_1(b: &[u8], y: &mut [f32]) {
    let d = read_f16(b);
    for j in 0..32 {
        y[j] = b[4 + j] as i8 as f32 * d;
    }
}

fn q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let (d, dmin) = (read_f16(&b[80..]), read_f16(&b[82..]));
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

fn q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = q3_k_scales(&b[96..108]);
    let d = read_f16(&b[108..]);
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

fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (read_f16(b), read_f16(&b[2..]));
    let scales = &b[4..16];
    let qs = &b[16..144];
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

fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (read_f16(b), read_f16(&b[2..]));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
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

fn q6_k(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = read_f16(&b[208..]);
    for n in 0..2 {
        let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
        let y = &mut y[128 * n..128 * n + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

fn q8_k(b: &[u8], y: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for j in 0..256 {
        y[j] = b[4 + j] as i8 as f32 * d;
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

fn iq4_nl(b: &[u8], y: &mut [f32]) {
    iq4_run(&b[2..18], read_f16(b), y);
}

/// The signed 6-bit scale of 32-element sub-block `ib` of an IQ4_XS block.
pub fn iq4_xs_scale(b: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
    let high = ((scales_h >> (2 * ib)) & 3) as u8;
    (low | (high << 4)) as i32 - 32
}

fn iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = read_f16(b);
    for ib in 0..8 {
        iq4_run(&b[8 + 16 * ib..24 + 16 * ib], d * iq4_xs_scale(b, ib) as f32, &mut y[32 * ib..32 * ib + 32]);
    }
}
