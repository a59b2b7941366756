//! Weights repacked at load time so one pass of the matrix kernel serves four weight rows.
//!
//! In a GGUF file each row of a 32-element format is a run of blocks, each block its scale(s)
//! followed by its quants. A kernel that walks one row pays the scale handling (an f16
//! conversion, a scalar multiply, a broadcast) for every 32 weights, and on two cores that
//! bookkeeping, not memory, bounded decode (about 10 cycles per block, ~18 GB/s of a
//! measured 51). Here four rows are interleaved block by block, their scales side by side,
//! so a kernel loads 4 × 32 weights and 4 scales with a few wide loads and one conversion.
//!
//! Layouts of one *group block* (four rows × one 32-element block):
//! * nibbles (from Q4_0 and Q4_1), 80 bytes: the four rows' 16 quant bytes (byte `e` holds
//!   element `e` in its low nibble and `e + 16` in its high one, as in the file), then eight
//!   f16: `d0..d3`, `m0..m3`. A row's block is `d · q + min_scale · m` with
//!   `min_scale` 1 for Q4_1 (m is the block minimum) and −8 for Q4_0 (m = d);
//! * bytes (from Q8_0), 136 bytes: elements 0..16 of rows 0..3 (16 bytes each), then elements
//!   16..32 of rows 0..3, then four f16 scales `d0..d3`;
//! * five-bit (from Q5_0 and Q5_1; x86-64 only), 96 bytes: the nibbles' 80 bytes, then each
//!   row's word of fifth bits (bit `e` is element `e`'s), as in the file. `min_scale` is −16
//!   for Q5_0 (m = d) and 1 for Q5_1. K-quant files store rows that are not whole 256-element
//!   super-blocks in Q5_0 (Gemma 3 270M's 640-wide ones), whose row-by-row kernel read about a
//!   third as fast as this layout's.
//!
//! Groups are stored one after another, each holding its row blocks in order. A tensor whose
//! row count is not a multiple of four is padded with zero rows (zero scales).
//! The original bytes stay where they are: embedding lookups and any product this layout does
//! not cover read them.

use super::q8::Q8Row;
use zinc_formats::half::read_f16;
use zinc_formats::GgmlType::{self, *};

/// Weight rows per group.
pub const GROUP: usize = 4;

/// How a group block stores its quants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PackedKind {
    /// 4-bit quants with a minimum term scaled by `min_scale`.
    Nibbles {
        /// 1 for Q4_1, −8 for Q4_0.
        min_scale: f32,
    },
    /// Signed 8-bit quants.
    Bytes,
    /// 4-bit quants and a fifth bit per element, with a minimum term as for `Nibbles`.
    Nibbles5 {
        /// 1 for Q5_1, −16 for Q5_0.
        min_scale: f32,
    },
}

impl PackedKind {
    /// Bytes per group block.
    pub fn group_block_bytes(self) -> usize {
        match self {
            PackedKind::Nibbles { .. } => 80,
            PackedKind::Bytes => 136,
            PackedKind::Nibbles5 { .. } => 96,
        }
    }
}

/// A weight matrix in the four-row interleaved layout.
pub struct Packed {
    /// Quant layout.
    pub kind: PackedKind,
    /// 32-element blocks per row.
    pub blocks: usize,
    /// Groups of four rows (the last may be padded).
    pub groups: usize,
    data: Vec<u8>,
}

impl Packed {
    /// Repacks `rows` rows of `ty` (each `blocks` blocks long, laid out as in the file);
    /// `None` for types this layout does not cover.
    pub fn pack(ty: GgmlType, bytes: &[u8], rows: usize, row_len: usize) -> Option<Packed> {
        // Each file block's fields as (offset in the block, bytes, offset of row 0's copy in
        // the group block): row j's copy lies `j · bytes` further. Types without an offset
        // store their scale in both scale slots.
        type Fields = &'static [(usize, usize, usize)];
        let (kind, src_block, fields): (PackedKind, usize, Fields) = match ty {
            Q4_0 => (PackedKind::Nibbles { min_scale: -8.0 }, 18, &[(2, 16, 0), (0, 2, 64), (0, 2, 72)]),
            Q4_1 => (PackedKind::Nibbles { min_scale: 1.0 }, 20, &[(4, 16, 0), (0, 2, 64), (2, 2, 72)]),
            Q8_0 => (PackedKind::Bytes, 34, &[(2, 16, 0), (18, 16, 64), (0, 2, 128)]),
            // Only x86-64 has kernels for it; elsewhere the row kernels are faster than the
            // plain group code.
            Q5_0 if cfg!(target_arch = "x86_64") => {
                (PackedKind::Nibbles5 { min_scale: -16.0 }, 22, &[(6, 16, 0), (0, 2, 64), (0, 2, 72), (2, 4, 80)])
            }
            Q5_1 if cfg!(target_arch = "x86_64") => {
                (PackedKind::Nibbles5 { min_scale: 1.0 }, 24, &[(8, 16, 0), (0, 2, 64), (2, 2, 72), (4, 4, 80)])
            }
            _ => return None,
        };
        if !row_len.is_multiple_of(32) || bytes.len() != rows * row_len / 32 * src_block {
            return None;
        }
        let blocks = row_len / 32;
        let groups = rows.div_ceil(GROUP);
        let gb = kind.group_block_bytes();
        let mut data = vec![0u8; groups * blocks * gb];
        for row in 0..rows {
            let (g, j) = (row / GROUP, row % GROUP);
            for k in 0..blocks {
                let src = &bytes[(row * blocks + k) * src_block..][..src_block];
                let dst = &mut data[(g * blocks + k) * gb..][..gb];
                for &(at, len, base) in fields {
                    dst[base + len * j..][..len].copy_from_slice(&src[at..at + len]);
                }
            }
        }
        Some(Packed { kind, blocks, groups, data })
    }

    /// The bytes of group `g` (its `blocks` group blocks).
    pub fn group(&self, g: usize) -> &[u8] {
        let n = self.blocks * self.kind.group_block_bytes();
        &self.data[g * n..(g + 1) * n]
    }

    /// `out[r][j]` = row `4g + j` · `a[r]`, with the best kernel this CPU has.
    #[inline]
    pub fn dot_group<const R: usize>(&self, g: usize, a: &[&Q8Row; R], out: &mut [[f32; GROUP]; R]) {
        #[cfg(target_arch = "x86_64")]
        if super::x86_packed::dot_group(self.kind, self.group(g), self.blocks, a, out) {
            return;
        }
        #[cfg(target_arch = "aarch64")]
        if super::arm_packed::dot_group(self.kind, self.group(g), self.blocks, a, out) {
            return;
        }
        self.dot_group_scalar(g, a, out)
    }

    /// Panics unless `g` and every activation row are long enough for `blocks` blocks: the
    /// SIMD kernels read them without bounds checks.
    pub fn check_lengths<const R: usize>(kind: PackedKind, g: &[u8], blocks: usize, a: &[&Q8Row; R]) {
        assert!(g.len() >= blocks * kind.group_block_bytes(), "packed group shorter than its blocks");
        for row in a {
            assert!(
                row.qs.len() >= blocks * 32 && row.d.len() >= blocks && row.s.len() >= blocks,
                "activation row too short"
            );
        }
    }

    /// The plain version every SIMD kernel is tested against.
    pub fn dot_group_scalar<const R: usize>(&self, g: usize, a: &[&Q8Row; R], out: &mut [[f32; GROUP]; R]) {
        let gb = self.kind.group_block_bytes();
        let data = self.group(g);
        for (r, row_out) in out.iter_mut().enumerate() {
            for (j, o) in row_out.iter_mut().enumerate() {
                let mut sum = 0f32;
                for k in 0..self.blocks {
                    let b = &data[k * gb..(k + 1) * gb];
                    let q = &a[r].qs[k * 32..k * 32 + 32];
                    let mut dot = 0i32;
                    sum += match self.kind {
                        PackedKind::Nibbles { min_scale } | PackedKind::Nibbles5 { min_scale } => {
                            let high = match self.kind {
                                PackedKind::Nibbles5 { .. } => {
                                    u32::from_le_bytes(b[80 + 4 * j..84 + 4 * j].try_into().expect("four bytes"))
                                }
                                _ => 0,
                            };
                            let fifth = |e: usize| (((high >> e) & 1) << 4) as i32;
                            for e in 0..16 {
                                let byte = b[16 * j + e];
                                dot += ((byte & 15) as i32 | fifth(e)) * q[e] as i32
                                    + ((byte >> 4) as i32 | fifth(e + 16)) * q[e + 16] as i32;
                            }
                            let (d, m) = (read_f16(&b[64 + 2 * j..]), read_f16(&b[72 + 2 * j..]));
                            d * a[r].d[k] * dot as f32 + min_scale * m * a[r].s[k]
                        }
                        PackedKind::Bytes => {
                            for e in 0..16 {
                                dot += b[16 * j + e] as i8 as i32 * q[e] as i32
                                    + b[64 + 16 * j + e] as i8 as i32 * q[e + 16] as i32;
                            }
                            read_f16(&b[128 + 2 * j..]) * a[r].d[k] * dot as f32
                        }
                    };
                }
                *o = sum;
            }
        }
    }
}
