//! How the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) are laid out on the
//! device. A GGUF block packs its scale, high bits and quants into 18 to 34 bytes, so block
//! starts fall on odd words and a kernel reads each block in several unaligned pieces. On
//! upload each row is regrouped eight blocks at a time: the eight blocks' quant bytes, then
//! their high-bit words, then their scales. Every block's quants then start on a 16-byte
//! boundary (one 16-byte load in the decode kernel) and neighbouring threads' scales are
//! adjacent. Rows are padded to whole groups. `shaders/blocks/block_layout.glsl` is the reading side;
//! the layout changes nothing else (same bytes per block, same values).
//!
//! Q6_K's 210-byte super-blocks would start on odd half-words, Q2_K's 84-byte, Q3_K's 110-byte
//! and IQ4_XS's 136-byte ones off 16-byte boundaries; on upload eight of them form a group:
//! their bodies (Q6_K: low nibbles, high bits, scales; Q2_K: scales, quants; Q3_K: high bits,
//! quants; IQ4_XS: quants), then their eight factor fields (Q6_K's f16 d; Q2_K's d and dmin;
//! Q3_K's 12 scale bytes and d; IQ4_XS's d and scales, 8 bytes). Every body then starts on a
//! 16-byte boundary. IQ4_NL has Q4_0's
//! fields and takes its layout. The other K-quants' super-blocks (144 and 176
//! bytes) are aligned as they are.
//!
//! Q4_K, Q5_K and Q6_K quants are also put in sub-block order ([`sub_blocks`]): each 32-value
//! sub-block's bits contiguous, so that a thread that takes one sub-block reads only its own.
//!
//! Other formats are uploaded as they are in the file.

mod sub_blocks;

use std::mem::{offset_of, size_of};
use zinc_formats::{blocks::*, GgmlType};

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
fn fields(dtype: GgmlType) -> Option<Fields> {
    use GgmlType::*;
    let quants = size_of::<[u8; QK / 2]>();
    let f = match dtype {
        Q4_0 => Fields { scale: offset_of!(BlockQ4_0, qs), high: 0, quants },
        Q4_1 => Fields { scale: offset_of!(BlockQ4_1, qs), high: 0, quants },
        Q5_0 => Fields { scale: offset_of!(BlockQ5_0, qh), high: 4, quants },
        Q5_1 => Fields { scale: offset_of!(BlockQ5_1, qh), high: 4, quants },
        Q8_0 => Fields { scale: offset_of!(BlockQ8_0, qs), high: 0, quants: QK },
        IQ4_NL => Fields { scale: offset_of!(BlockIQ4NL, qs), high: 0, quants },
        _ => return None,
    };
    debug_assert_eq!(f.block(), dtype.block_bytes());
    Some(f)
}

/// A super-block format whose factor fields (the `lead` bytes before its body and the `trail`
/// bytes after it) move to the end of each group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SuperFields {
    lead: usize,
    body: usize,
    trail: usize,
}

impl SuperFields {
    fn block(self) -> usize {
        self.lead + self.body + self.trail
    }
    /// Bytes of one super-block's factor fields (lead, then trail).
    fn factors(self) -> usize {
        self.lead + self.trail
    }
    /// A group: eight bodies, then eight factor fields padded to 16 bytes.
    fn group(self) -> usize {
        GROUP * self.body + (GROUP * self.factors()).next_multiple_of(16)
    }
}

/// The fields of a super-block format regrouped on upload (Q2_K, Q3_K, Q6_K, IQ4_XS), or None.
fn super_fields(dtype: GgmlType) -> Option<SuperFields> {
    match dtype {
        // Q6_K: quants and scales, then d.
        GgmlType::Q6_K => Some(SuperFields { lead: 0, body: offset_of!(BlockQ6K, d), trail: size_of::<Half>() }),
        // Q2_K: scales and quants, then d and dmin.
        GgmlType::Q2_K => Some(SuperFields { lead: 0, body: offset_of!(BlockQ2K, d), trail: 2 * size_of::<Half>() }),
        // Q3_K: high bits and quants, then the 12 scale bytes and d (108 bytes of body would
        // leave the next one off a 16-byte boundary).
        GgmlType::Q3_K => Some(SuperFields {
            lead: 0,
            body: offset_of!(BlockQ3K, scales),
            trail: size_of::<[u8; 12]>() + size_of::<Half>(),
        }),
        // IQ4_XS: d and scales, then quants.
        GgmlType::IQ4_XS => {
            Some(SuperFields { lead: offset_of!(BlockIQ4XS, qs), body: size_of::<[u8; QK_K / 2]>(), trail: 0 })
        }
        _ => None,
    }
}

/// The in-place rewrite of one super-block of a format whose quants are put in sub-block order
/// without moving its other fields (Q4_K, Q5_K), or None.
fn in_place_order(dtype: GgmlType) -> Option<fn(&mut [u8])> {
    match dtype {
        GgmlType::Q4_K => Some(sub_blocks::q4_k),
        GgmlType::Q5_K => Some(sub_blocks::q5_k),
        _ => None,
    }
}

/// Whether tensors of this type are rewritten on upload (regrouped or put in sub-block order),
/// rather than copied as they are.
pub fn rewritten_on_upload(dtype: GgmlType) -> bool {
    fields(dtype).is_some() || super_fields(dtype).is_some() || in_place_order(dtype).is_some()
}

/// Bytes of one row on the device, given its bytes in the file: whole groups for the grouped
/// formats, the file's row otherwise.
pub fn device_row_bytes(dtype: GgmlType, file_row_bytes: usize) -> usize {
    if let Some(f) = super_fields(dtype) {
        return file_row_bytes.div_ceil(f.block() * GROUP) * f.group();
    }
    match fields(dtype) {
        Some(f) => file_row_bytes.div_ceil(f.block() * GROUP) * f.block() * GROUP,
        None => file_row_bytes,
    }
}

/// [`write_device_rows`] for a super-block format: each body to its slot in its group, each
/// factor field after the group's bodies.
fn write_super_rows(f: SuperFields, dtype: GgmlType, rows: &[u8], file_row_bytes: usize, out: &mut [u8]) {
    let device_row = device_row_bytes(dtype, file_row_bytes);
    for (row, dst) in rows.chunks_exact(file_row_bytes).zip(out.chunks_exact_mut(device_row)) {
        dst.fill(0);
        for (i, block) in row.chunks_exact(f.block()).enumerate() {
            let (group, j) = (i / GROUP * f.group(), i % GROUP);
            let (lead, rest) = block.split_at(f.lead);
            let (body, trail) = rest.split_at(f.body);
            let slot = &mut dst[group + j * f.body..][..f.body];
            if dtype == GgmlType::Q6_K {
                write_rewritten(body, sub_blocks::q6_k_body, slot);
            } else {
                slot.copy_from_slice(body);
            }
            let factors = group + GROUP * f.body + j * f.factors();
            dst[factors..][..f.lead].copy_from_slice(lead);
            dst[factors + f.lead..][..f.trail].copy_from_slice(trail);
        }
    }
}

/// Largest block [`write_rewritten`] takes (a Q5_K super-block is 176 bytes).
const MAX_REWRITTEN: usize = 256;

/// Writes `bytes` rewritten by `order` to `out`, rewriting a copy on the stack. The layouts below write into the
/// mapped staging buffer, which on a discrete GPU is write-combined memory or the device's own
/// memory behind the PCIe bar: writing it streams, but every read from it is an uncached
/// round trip (rewriting Q6_K bodies in place there made a 7B file's upload take minutes).
fn write_rewritten(bytes: &[u8], order: fn(&mut [u8]), out: &mut [u8]) {
    let mut copy = [0u8; MAX_REWRITTEN];
    let copy = &mut copy[..bytes.len()];
    copy.copy_from_slice(bytes);
    order(copy);
    out.copy_from_slice(copy);
}

/// Rows of the file (`file_row_bytes` each) in the device's layout, written to `out` (as many
/// device rows; padding is zeroed). Used on the staging buffer directly, so the regrouping
/// costs no extra copy of the weights; `out` is only written, never read (see [`write_rewritten`]).
pub fn write_device_rows(dtype: GgmlType, rows: &[u8], file_row_bytes: usize, out: &mut [u8]) {
    if let Some(f) = super_fields(dtype) {
        return write_super_rows(f, dtype, rows, file_row_bytes, out);
    }
    if let Some(order) = in_place_order(dtype) {
        let n = dtype.block_bytes();
        for (block, dst) in rows.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            write_rewritten(block, order, dst);
        }
        return;
    }
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
        for dtype in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0] {
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

    /// Q2_K, Q3_K, Q6_K: 11 super-blocks per row (one whole group and a partial one): each body
    /// at its 16-byte-aligned slot, each super-block's trailing factors (Q2_K: d, dmin; Q3_K:
    /// scales, d; Q6_K: d) after its group's bodies, where block_layout.glsl's `kbody_at` and
    /// `kfactors_at` look; padding zeroed.
    #[test]
    fn trailing_factor_bodies_and_factors_land_where_the_shaders_read_them() {
        use GgmlType::*;
        // (type, super-block bytes, body bytes, group bytes), spelled out from the formats.
        for (ty, block, body_bytes, group) in
            [(Q6_K, 210, 208, 8 * 208 + 16), (Q2_K, 84, 80, 8 * 80 + 32), (Q3_K, 110, 96, 8 * 96 + 112)]
        {
            let trail = block - body_bytes;
            let (nb, rows) = (11usize, 2usize);
            let file_row = nb * block;
            let file: Vec<u8> = (0..file_row * rows).map(|i| (i * 13 + i / 211) as u8).collect();
            let dev_row = device_row_bytes(ty, file_row);
            assert_eq!(dev_row, 2 * group, "type {ty}");
            let mut dev = vec![0xa5; dev_row * rows];
            write_device_rows(ty, &file, file_row, &mut dev);
            for r in 0..rows {
                for s in 0..nb {
                    let src = &file[r * file_row + s * block..][..block];
                    let body = r * dev_row + s / 8 * group + (s % 8) * body_bytes;
                    let f = r * dev_row + s / 8 * group + 8 * body_bytes + trail * (s % 8);
                    assert_eq!(body % 16, 0);
                    // Q6_K's quants are also in sub-block order (sub_blocks.rs checks each value).
                    let mut want = src[..body_bytes].to_vec();
                    if ty == Q6_K {
                        sub_blocks::q6_k_body(&mut want);
                    }
                    assert_eq!(dev[body..body + body_bytes], want, "{ty} row {r} super-block {s}");
                    assert_eq!(&dev[f..f + trail], &src[body_bytes..], "{ty} row {r} super-block {s}'s factors");
                }
                let g = r * dev_row + group;
                for s in nb % 8..8 {
                    let slot = g + s * body_bytes;
                    assert!(dev[slot..slot + body_bytes].iter().all(|&x| x == 0), "{ty}: padding zeroed");
                    let f = g + 8 * body_bytes + trail * s;
                    assert!(dev[f..f + trail].iter().all(|&x| x == 0), "{ty}: padding zeroed");
                }
            }
        }
        assert!([Q6_K, IQ4_XS, IQ4_NL, Q4_K, Q5_K].into_iter().all(rewritten_on_upload));
        assert!(!rewritten_on_upload(F16) && !rewritten_on_upload(Q8_K));
    }

    /// IQ4_XS: each super-block's 128 quant bytes in its 16-byte-aligned slot, its first 8
    /// bytes (d, scales) after the group's bodies.
    #[test]
    fn iq4_xs_bodies_and_headers_land_where_the_shaders_read_them() {
        let (nb, block) = (9usize, 136usize);
        let file: Vec<u8> = (0..nb * block).map(|i| (i * 7 + i / 137) as u8).collect();
        let dev_row = device_row_bytes(GgmlType::IQ4_XS, file.len());
        let group = 8 * 128 + 64;
        assert_eq!(dev_row, 2 * group);
        let mut dev = vec![0xa5; dev_row];
        write_device_rows(GgmlType::IQ4_XS, &file, file.len(), &mut dev);
        for s in 0..nb {
            let src = &file[s * block..][..block];
            let body = s / 8 * group + (s % 8) * 128;
            let head = s / 8 * group + 8 * 128 + 8 * (s % 8);
            assert_eq!(&dev[body..body + 128], &src[8..], "super-block {s}'s quants");
            assert_eq!(&dev[head..head + 8], &src[..8], "super-block {s}'s d and scales");
        }
    }

    /// Q4_K and Q5_K keep their super-blocks in place, each with its quants in sub-block order.
    #[test]
    fn q4_k_and_q5_k_super_blocks_stay_in_place() {
        for (ty, order) in [(GgmlType::Q4_K, sub_blocks::q4_k as fn(&mut [u8])), (GgmlType::Q5_K, sub_blocks::q5_k)] {
            let block = ty.block_bytes();
            let file: Vec<u8> = (0..3 * block).map(|i| (i * 11 + i / 13) as u8).collect();
            assert_eq!(device_row_bytes(ty, file.len()), file.len());
            let mut dev = vec![0xa5; file.len()];
            write_device_rows(ty, &file, file.len(), &mut dev);
            for (s, (got, src)) in dev.chunks(block).zip(file.chunks(block)).enumerate() {
                let mut want = src.to_vec();
                order(&mut want);
                assert_eq!(got, want, "{ty} super-block {s}");
                assert_ne!(got, src, "{ty}: the quants were reordered");
            }
        }
    }

    #[test]
    fn other_types_are_uploaded_as_they_are() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut dev = vec![0; bytes.len()];
        write_device_rows(GgmlType::F32, &bytes, 16, &mut dev);
        assert_eq!(dev, bytes);
        assert_eq!(device_row_bytes(GgmlType::Q4_K, 144), 144);
    }
}
