//! How the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) are laid out on the
//! device. A GGUF block packs its scale, high bits and quants into 18 to 34 bytes, so block
//! starts fall on odd words and a kernel reads each block in several unaligned pieces. On
//! upload each row is regrouped eight blocks at a time: the eight blocks' quant bytes, then
//! their high-bit words, then their scales. Every block's quants then start on a 16-byte
//! boundary (one 16-byte load in the decode kernel) and neighbouring threads' scales are
//! adjacent. Rows are padded to whole groups. `shaders/block_layout.glsl` is the reading side;
//! the layout changes nothing else (same bytes per block, same values).
//!
//! Other formats are uploaded as they are in the file.

/// Blocks per group.
const GROUP: usize = 8;

/// The byte widths of one block's fields, in their GGUF order (scale first, then high bits,
/// then quants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    scale: usize,
    high: usize,
    quants: usize,
}

impl Fields {
    fn block(self) -> usize {
        self.scale + self.high + self.quants
    }
}

/// The fields of a 32-element block format, or None for a type uploaded as it is.
fn fields(dtype: u32) -> Option<Fields> {
    let (scale, high, quants) = match dtype {
        2 => (2, 0, 16), // Q4_0
        3 => (4, 0, 16), // Q4_1
        6 => (2, 4, 16), // Q5_0
        7 => (4, 4, 16), // Q5_1
        8 => (2, 0, 32), // Q8_0
        _ => return None,
    };
    Some(Fields { scale, high, quants })
}

/// Whether tensors of this type are regrouped on upload.
pub fn regrouped(dtype: u32) -> bool {
    fields(dtype).is_some()
}

/// Bytes of one row on the device, given its bytes in the file: whole groups for the grouped
/// formats, the file's row otherwise.
pub fn device_row_bytes(dtype: u32, file_row_bytes: usize) -> usize {
    match fields(dtype) {
        Some(f) => file_row_bytes.div_ceil(f.block() * GROUP) * f.block() * GROUP,
        None => file_row_bytes,
    }
}

/// Rows of the file (`file_row_bytes` each) in the device's layout, written to `out` (as many
/// device rows; padding is zeroed). Used on the staging buffer directly, so the regrouping
/// costs no extra copy of the weights.
pub fn write_device_rows(dtype: u32, rows: &[u8], file_row_bytes: usize, out: &mut [u8]) {
    let Some(f) = fields(dtype) else {
        out.copy_from_slice(rows);
        return;
    };
    let device_row = device_row_bytes(dtype, file_row_bytes);
    let group_bytes = f.block() * GROUP;
    for (row, dst) in rows.chunks_exact(file_row_bytes).zip(out.chunks_exact_mut(device_row)) {
        // A partial last group: its unused slots lie between the used ones.
        dst[file_row_bytes / f.block() / GROUP * group_bytes..].fill(0);
        for (b, block) in row.chunks_exact(f.block()).enumerate() {
            let (group, j) = (b / GROUP * group_bytes, b % GROUP);
            let (scale, rest) = block.split_at(f.scale);
            let (high, quants) = rest.split_at(f.high);
            let qs = group + j * f.quants;
            dst[qs..qs + f.quants].copy_from_slice(quants);
            let qh = group + GROUP * f.quants + j * f.high;
            dst[qh..qh + f.high].copy_from_slice(high);
            let sc = group + GROUP * (f.quants + f.high) + j * f.scale;
            dst[sc..sc + f.scale].copy_from_slice(scale);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of every block lands where block_layout.glsl looks for it: quants at
    /// group + 16-byte-aligned slot, high bits after the group's quants, scales last.
    #[test]
    fn fields_land_where_the_shaders_read_them() {
        for dtype in [2u32, 3, 6, 7, 8] {
            let f = fields(dtype).unwrap();
            // 11 blocks per row: one whole group and a partial one; two rows.
            let (nb, rows) = (11usize, 2usize);
            let file_row = nb * f.block();
            let file: Vec<u8> = (0..file_row * rows).map(|i| (i * 7 + i / 251) as u8).collect();
            let dev_row = device_row_bytes(dtype, file_row);
            // Stale bytes where the padding goes: they must come out zero.
            let mut dev = vec![0xa5; dev_row * rows];
            write_device_rows(dtype, &file, file_row, &mut dev);
            assert_eq!(dev_row % 16, 0, "type {dtype}: device rows start 16-byte aligned");
            assert_eq!(dev.len(), dev_row * rows);
            let group_bytes = GROUP * f.block();
            for r in 0..rows {
                for b in 0..nb {
                    let src = &file[r * file_row + b * f.block()..][..f.block()];
                    let g = r * dev_row + b / GROUP * group_bytes;
                    let j = b % GROUP;
                    let qs = g + j * f.quants;
                    let qh = g + GROUP * f.quants + j * f.high;
                    let sc = g + GROUP * (f.quants + f.high) + j * f.scale;
                    assert_eq!(qs % 16, 0);
                    assert_eq!(&dev[qs..qs + f.quants], &src[f.scale + f.high..], "type {dtype} row {r} block {b}");
                    assert_eq!(&dev[qh..qh + f.high], &src[f.scale..f.scale + f.high]);
                    assert_eq!(&dev[sc..sc + f.scale], &src[..f.scale]);
                }
                // The partial group's slots past its last block are zeros, not stale bytes.
                let g = r * dev_row + nb / GROUP * group_bytes;
                for j in nb % GROUP..GROUP {
                    let slots = [
                        (g + j * f.quants, f.quants),
                        (g + GROUP * f.quants + j * f.high, f.high),
                        (g + GROUP * (f.quants + f.high) + j * f.scale, f.scale),
                    ];
                    for (at, len) in slots {
                        assert!(dev[at..at + len].iter().all(|&x| x == 0), "type {dtype}: padding zeroed");
                    }
                }
            }
        }
    }

    #[test]
    fn other_types_are_uploaded_as_they_are() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut dev = vec![0; bytes.len()];
        write_device_rows(0, &bytes, 16, &mut dev);
        assert_eq!(dev, bytes);
        assert_eq!(device_row_bytes(12, 144), 144);
    }
}
