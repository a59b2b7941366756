//! The device layout of weight rows in the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
//! as shaders/blocks.glsl reads it: a row's blocks split by part — every block's quantized
//! values, then every block's high bits (Q5_x), then every block's scale fields — with rows
//! padded to 16 bytes. Why: a GGUF block (18 bytes for Q4_0) is not aligned, so a kernel read
//! its 16 bytes of values as six word loads; split, they are one aligned 16-byte load and a
//! subgroup's consecutive blocks are consecutive memory. Other types keep the file's layout.

/// Bytes of a block's scale fields (f16 d, and f16 m where the type has an offset), its high
/// bits and its quantized values, in the order GGUF stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockParts {
    /// Scale fields, first in the GGUF block.
    pub scales: usize,
    /// High bits (Q5_x), after the scales.
    pub high: usize,
    /// Quantized values, last.
    pub values: usize,
}

impl BlockParts {
    fn block(&self) -> usize {
        self.scales + self.high + self.values
    }
}

/// The parts of a block of ggml type `dtype` when its rows are split on the device.
pub fn split_parts(dtype: u32) -> Option<BlockParts> {
    let (scales, high, values) = match dtype {
        2 => (2, 0, 16), // Q4_0
        3 => (4, 0, 16), // Q4_1
        6 => (2, 4, 16), // Q5_0
        7 => (4, 4, 16), // Q5_1
        8 => (2, 0, 32), // Q8_0
        _ => return None,
    };
    Some(BlockParts { scales, high, values })
}

/// Bytes between rows on the device: `row_bytes` rounded up to 16 for split types.
pub fn device_row_stride(dtype: u32, row_bytes: usize) -> usize {
    if split_parts(dtype).is_some() {
        row_bytes.next_multiple_of(16)
    } else {
        row_bytes
    }
}

/// Writes one GGUF row (`src`, whole blocks) into `dst` (at least `src.len()` bytes) split
/// by part.
pub fn split_row(parts: BlockParts, src: &[u8], dst: &mut [u8]) {
    let nb = src.len() / parts.block();
    let (values, rest) = dst.split_at_mut(nb * parts.values);
    let (high, scales) = rest.split_at_mut(nb * parts.high);
    for (b, block) in src.chunks_exact(parts.block()).enumerate() {
        let (s, rest) = block.split_at(parts.scales);
        let (h, v) = rest.split_at(parts.high);
        scales[b * parts.scales..][..parts.scales].copy_from_slice(s);
        high[b * parts.high..][..parts.high].copy_from_slice(h);
        values[b * parts.values..][..parts.values].copy_from_slice(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_q5_1_row_puts_each_part_where_the_shaders_read_it() {
        let parts = split_parts(7).unwrap();
        // Two blocks of 24 bytes: block b's byte i is 100·b + i.
        let src: Vec<u8> = (0..2u8).flat_map(|b| (0..24u8).map(move |i| 100 * b + i)).collect();
        let mut dst = vec![0u8; device_row_stride(7, src.len())];
        assert_eq!(dst.len(), 48);
        split_row(parts, &src, &mut dst);
        // Values (bytes 8..24 of each block), then high bits (4..8), then d and m (0..4).
        let expect: Vec<u8> = [(0, 8..24), (1, 8..24), (0, 4..8), (1, 4..8), (0, 0..4), (1, 0..4)]
            .into_iter()
            .flat_map(|(b, r)| r.map(move |i| 100 * b + i))
            .collect();
        assert_eq!(dst, expect);
    }

    #[test]
    fn rows_of_split_types_are_padded_to_16_bytes_and_others_are_not() {
        assert_eq!(device_row_stride(2, 18 * 18), 336); // Q4_0, 576 elements
        assert_eq!(device_row_stride(8, 34 * 128), 34 * 128);
        assert_eq!(device_row_stride(12, 144 * 3), 432); // Q4_K keeps its layout
        assert!(split_parts(12).is_none() && split_parts(0).is_none());
    }
}
