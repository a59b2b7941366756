//! Q4_K, Q5_K and Q6_K quants rewritten on upload so that each 32-value sub-block's bits are
//! contiguous. In the file a sub-block shares its quant bytes with neighbours (Q4_K / Q5_K:
//! sub-blocks 2p and 2p + 1 are the low and high nibbles of the same 32 bytes; Q5_K's high
//! bits are bit j of 32 shared bytes; Q6_K: four sub-blocks share 64 bytes of low nibbles and
//! 32 of high bits), so a kernel that takes one sub-block per thread read two to four times
//! the bytes it used. On the device each super-block keeps its size and its other fields;
//! only the quant bytes are permuted (kblock.glsl and dequant.glsl read this order):
//!
//! - low nibbles (Q4_K, Q5_K, Q6_K): sub-block j's 16 bytes at 16·j, byte i holding values i
//!   (low nibble) and i + 16 (high nibble), as a Q4_0 block does;
//! - Q5_K's fifth bits: sub-block j's word at 4·j, bit e for value e (Q5_0's order);
//! - Q6_K's two high bits: sub-block j's 8 bytes at 128 + 8·j, two words; byte b of the first
//!   holds, in bits 2k and 2k + 1, the high bits of value 4k + b (k = 0..3), the second those
//!   of value 16 + 4k + b, so that `(word >> 2k) & 0x03030303` lines up with the low nibbles'
//!   word k.

use std::mem::offset_of;
use zinc_formats::blocks::*;

/// Sub-blocks of 32 values in a super-block.
const SUBS: usize = QK_K / QK;

/// Writes 32 values of 0..15 as 16 bytes in Q4_0's order (value i low, value i + 16 high).
fn pack_nibbles(value: impl Fn(usize) -> u8, out: &mut [u8]) {
    for (i, byte) in out[..QK / 2].iter_mut().enumerate() {
        *byte = value(i) | (value(i + QK / 2) << 4);
    }
}

/// Q4_K / Q5_K's 128 quant bytes, from pairs of sub-blocks sharing bytes to sub-block order.
fn reorder_k_nibbles(qs: &mut [u8]) {
    let file: [u8; QK_K / 2] = qs[..QK_K / 2].try_into().expect("128 quant bytes");
    for j in 0..SUBS {
        let nibble = |e: usize| (file[QK * (j / 2) + e] >> (4 * (j % 2))) & 15;
        pack_nibbles(nibble, &mut qs[QK / 2 * j..]);
    }
}

/// Q5_K's 32 bytes of fifth bits (bit j of byte e: sub-block j, value e) as one word per
/// sub-block.
fn reorder_q5k_high(qh: &mut [u8]) {
    let file: [u8; QK_K / 8] = qh[..QK_K / 8].try_into().expect("32 high-bit bytes");
    for j in 0..SUBS {
        let word = (0..QK).fold(0u32, |w, e| w | (u32::from((file[e] >> j) & 1) << e));
        qh[4 * j..4 * j + 4].copy_from_slice(&word.to_le_bytes());
    }
}

/// Q6_K's low nibbles and high bits (the body's first 192 bytes) in sub-block order.
fn reorder_q6k(body: &mut [u8]) {
    const QL: usize = QK_K / 2;
    let file: [u8; QL + QK_K / 4] = body[..QL + QK_K / 4].try_into().expect("Q6_K quant bytes");
    let (ql, qh) = file.split_at(QL);
    for j in 0..SUBS {
        // Sub-block j is quarter j % 4 of half j / 4: low nibbles from byte 32·(quarter & 1)
        // of the half's 64 (high nibbles for quarters 2 and 3), high bits 2·quarter of the
        // half's 32 bytes.
        let (half, quarter) = (j / 4, j % 4);
        let low = |e: usize| (ql[64 * half + 32 * (quarter & 1) + e] >> (4 * (quarter >> 1))) & 15;
        let high = |e: usize| (qh[32 * half + e] >> (2 * quarter)) & 3;
        pack_nibbles(low, &mut body[QK / 2 * j..]);
        let out = &mut body[QL + 8 * j..][..8];
        for b in 0..4 {
            let spread = |first: usize| (0..4).fold(0u8, |acc, k| acc | (high(first + 4 * k + b) << (2 * k)));
            out[b] = spread(0);
            out[4 + b] = spread(QK / 2);
        }
    }
}

/// Rewrites one Q4_K super-block (144 bytes) in place.
pub fn q4_k(block: &mut [u8]) {
    reorder_k_nibbles(&mut block[offset_of!(BlockQ4K, qs)..]);
}

/// Rewrites one Q5_K super-block (176 bytes) in place.
pub fn q5_k(block: &mut [u8]) {
    reorder_k_nibbles(&mut block[offset_of!(BlockQ5K, qs)..]);
    reorder_q5k_high(&mut block[offset_of!(BlockQ5K, qh)..]);
}

/// Rewrites one Q6_K super-block's body (its first 208 bytes, as the device groups it) in
/// place.
pub fn q6_k_body(body: &mut [u8]) {
    debug_assert_eq!(offset_of!(BlockQ6K, ql), 0);
    reorder_q6k(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value's bits, read back in the device order, are the file's: the reference
    /// positions follow ggml's dequantizers (value 32·j + e of a super-block).
    #[test]
    fn every_value_keeps_its_bits() {
        let file: Vec<u8> = (0..210).map(|i| (i * 37 + i / 7) as u8).collect();
        // Q4_K / Q5_K: value 32j + e is nibble j % 2 of qs[32·(j / 2) + e]; Q5_K's fifth bit is
        // bit j of qh[e].
        let mut q5 = file[..176].to_vec();
        q5_k(&mut q5);
        let (qh_at, qs_at) = (offset_of!(BlockQ5K, qh), offset_of!(BlockQ5K, qs));
        assert_eq!(q5[..qh_at], file[..qh_at], "d, dmin and scales are untouched");
        for j in 0..8 {
            let word = u32::from_le_bytes(q5[qh_at + 4 * j..][..4].try_into().unwrap());
            for e in 0..32 {
                let want = (file[qs_at + 32 * (j / 2) + e] >> (4 * (j % 2))) & 15;
                let byte = q5[qs_at + 16 * j + e % 16];
                assert_eq!(if e < 16 { byte & 15 } else { byte >> 4 }, want, "sub-block {j} value {e}");
                assert_eq!((word >> e) & 1, u32::from((file[qh_at + e] >> j) & 1), "fifth bit {j}/{e}");
            }
        }
        // Q6_K: value 128n + 32q + l has low bits from ql[64n + l + 32(q & 1)] (nibble q / 2)
        // and high bits (qh[32n + l] >> 2q) & 3.
        let mut q6 = file[..208].to_vec();
        q6_k_body(&mut q6);
        assert_eq!(q6[192..], file[192..208], "scales are untouched");
        for j in 0..8 {
            let (n, q) = (j / 4, j % 4);
            for e in 0..32 {
                let low = (file[64 * n + e + 32 * (q & 1)] >> (4 * (q / 2))) & 15;
                let high = (file[128 + 32 * n + e] >> (2 * q)) & 3;
                let byte = q6[16 * j + e % 16];
                assert_eq!(if e < 16 { byte & 15 } else { byte >> 4 }, low, "sub-block {j} value {e}");
                let (word, k, b) = (if e < 16 { 0 } else { 4 }, (e % 16) / 4, e % 4);
                assert_eq!((q6[128 + 8 * j + word + b] >> (2 * k)) & 3, high, "high bits {j}/{e}");
            }
        }
    }
}
