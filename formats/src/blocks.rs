//! ggml's block structs, field for field (ggml-common.h), so that code reads `b.qs` and
//! `b.d` instead of byte offsets.
//!
//! Every field is a byte array (an f16 is a [`Half`]), so every struct has alignment 1 and a
//! slice of file bytes can be viewed as a slice of blocks in place ([`as_blocks`]). Sizes are
//! checked at compile time with ggml's own formulas.

use crate::half::f16_to_f32;
use std::mem::{align_of, size_of};

/// Elements in one block of the 32-element formats.
pub const QK: usize = 32;
/// Elements in one K-quant super-block.
pub const QK_K: usize = 256;

/// An IEEE half stored little-endian, as ggml's `ggml_half`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Half(pub [u8; 2]);

impl Half {
    /// The value as f32.
    pub fn to_f32(self) -> f32 {
        f16_to_f32(u16::from_le_bytes(self.0))
    }
}

/// Q4_0: `d · (q − 8)`, 4-bit q; low nibbles are elements 0..16, high nibbles 16..32.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4_0 {
    pub d: Half,
    pub qs: [u8; QK / 2],
}

/// Q4_1: `d · q + m`, 4-bit q.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4_1 {
    pub d: Half,
    pub m: Half,
    pub qs: [u8; QK / 2],
}

/// Q5_0: `d · (q − 16)`, q's fifth bits in `qh` (bit j for element j).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5_0 {
    pub d: Half,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// Q5_1: `d · q + m`, 5-bit q.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5_1 {
    pub d: Half,
    pub m: Half,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// Q8_0: `d · q`, 8-bit signed q.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ8_0 {
    pub d: Half,
    pub qs: [i8; QK],
}

/// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale and 4-bit minimum (`scales`), 2-bit q.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: Half,
    pub dmin: Half,
}

/// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales packed in 12 bytes; 2 low bits of q in
/// `qs`, the third in `hmask`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: Half,
}

/// Q4_K: 8 sub-blocks of 32, 6-bit scales and minimums packed in 12 bytes, 4-bit q.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4K {
    pub d: Half,
    pub dmin: Half,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

/// Q5_K: Q4_K plus a fifth bit per element in `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5K {
    pub d: Half,
    pub dmin: Half,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; 4 low bits of q in `ql`, 2 high in `qh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: Half,
}

/// Q8_K: ggml's activation format for K-quant dot products: an f32 scale, 8-bit q and the
/// sums of each 16 q.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockQ8K {
    /// An f32, little-endian.
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    /// 16 i16 sums, little-endian.
    pub bsums: [[u8; 2]; QK_K / 16],
}

/// IQ4_NL: Q4_0's layout with the 4-bit index looked up in a non-linear table.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIQ4NL {
    pub d: Half,
    pub qs: [u8; QK / 2],
}

/// IQ4_XS: 8 sub-blocks of 32 with signed 6-bit scales (4 low bits in `scales_l`, 2 high in
/// `scales_h`) and IQ4_NL's non-linear values.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockIQ4XS {
    pub d: Half,
    /// A u16, little-endian.
    pub scales_h: [u8; 2],
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

const HALF: usize = size_of::<Half>();
const _: () = {
    assert!(size_of::<BlockQ4_0>() == HALF + QK / 2);
    assert!(size_of::<BlockQ4_1>() == 2 * HALF + QK / 2);
    assert!(size_of::<BlockQ5_0>() == HALF + 4 + QK / 2);
    assert!(size_of::<BlockQ5_1>() == 2 * HALF + 4 + QK / 2);
    assert!(size_of::<BlockQ8_0>() == HALF + QK);
    assert!(size_of::<BlockQ2K>() == 2 * HALF + QK_K / 16 + QK_K / 4);
    assert!(size_of::<BlockQ3K>() == HALF + QK_K / 4 + QK_K / 8 + 12);
    assert!(size_of::<BlockQ4K>() == 2 * HALF + 12 + QK_K / 2);
    assert!(size_of::<BlockQ5K>() == 2 * HALF + 12 + QK_K / 2 + QK_K / 8);
    assert!(size_of::<BlockQ6K>() == HALF + QK_K / 16 + 3 * QK_K / 4);
    assert!(size_of::<BlockQ8K>() == 4 + QK_K + QK_K / 16 * 2);
    assert!(size_of::<BlockIQ4NL>() == HALF + QK / 2);
    assert!(size_of::<BlockIQ4XS>() == HALF + 2 + QK_K / 64 + QK_K / 2);
};

/// A block struct: plain bytes with alignment 1, so any byte slice of whole blocks is a valid
/// slice of it.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs made of byte arrays (every bit pattern valid, no
/// padding, alignment 1); the impls below are the complete list.
pub unsafe trait Block: Copy {}

macro_rules! blocks {
    ($($t:ty),*) => {$(
        // SAFETY: byte-array fields only, checked to have alignment 1 below.
        unsafe impl Block for $t {}
        const _: () = assert!(align_of::<$t>() == 1);
    )*};
}
blocks!(
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K,
    BlockIQ4NL, BlockIQ4XS
);

/// `bytes` viewed as blocks, `None` when it is not a whole number of them.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> Option<&[B]> {
    let size = size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    // SAFETY: `B` has alignment 1, no padding and every bit pattern valid (the `Block`
    // contract), and the length is a whole number of blocks.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) })
}

/// One block of `B` at the start of `bytes`. Panics when `bytes` is shorter than a block: for
/// kernels that already hold a whole row.
pub fn block_at<B: Block>(bytes: &[u8]) -> &B {
    &as_blocks::<B>(&bytes[..size_of::<B>()]).expect("one whole block")[0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn fields_sit_where_ggml_puts_them() {
        assert_eq!(offset_of!(BlockQ2K, d), 80);
        assert_eq!(offset_of!(BlockQ3K, scales), 96);
        assert_eq!(offset_of!(BlockQ5K, qs), 48);
        assert_eq!(offset_of!(BlockQ6K, scales), 192);
        assert_eq!(offset_of!(BlockIQ4XS, qs), 8);
    }

    #[test]
    fn byte_slices_view_as_blocks() {
        let bytes: Vec<u8> = (0..36).collect();
        let b = as_blocks::<BlockQ4_0>(&bytes).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[1].d.0, [18, 19]);
        assert!(as_blocks::<BlockQ4_0>(&bytes[..35]).is_none());
        assert_eq!(block_at::<BlockQ4_0>(&bytes[18..]).qs[0], 20);
    }
}
