//! PM4 type-3 packets, the command format of amdgpu's compute user queues (a user queue's
//! ring holds PM4 dwords; AQL is the KFD queues' format). zinc writes only the two packets
//! its smoke test needs; the emulated device parses the same definitions.

/// Type-3 header: `3 << 30 | (count - 1) << 16 | opcode << 8`, where count is the number of
/// dwords after the header.
pub const fn header(opcode: u8, body_dwords: u32) -> u32 {
    (3 << 30) | (((body_dwords - 1) & 0x3fff) << 16) | ((opcode as u32) << 8)
}

/// The opcode of a type-3 header.
pub const fn opcode(header: u32) -> u8 {
    (header >> 8) as u8
}

/// Dwords that follow a type-3 header.
pub const fn body_dwords(header: u32) -> u32 {
    ((header >> 16) & 0x3fff) + 1
}

/// True for a type-3 header (bits 30-31 equal 3).
pub const fn is_type3(header: u32) -> bool {
    header >> 30 == 3
}

/// `PACKET3_NOP`.
pub const NOP: u8 = 0x10;
/// `PACKET3_WRITE_DATA`.
pub const WRITE_DATA: u8 = 0x37;
/// WRITE_DATA control: destination is memory (`DST_SEL(5)`).
pub const WRITE_DATA_DST_MEMORY: u32 = 5 << 8;
/// WRITE_DATA control: wait for the write to be confirmed before the next packet.
pub const WRITE_DATA_CONFIRM: u32 = 1 << 20;

/// WRITE_DATA of `value` (two dwords) to the 8-byte aligned GPU address `va`.
pub fn write_data_u64(va: u64, value: u64) -> [u32; 6] {
    [
        header(WRITE_DATA, 5),
        WRITE_DATA_DST_MEMORY | WRITE_DATA_CONFIRM,
        va as u32,
        (va >> 32) as u32,
        value as u32,
        (value >> 32) as u32,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_encode_and_decode() {
        // PACKET3(PACKET3_WRITE_DATA, 4) as the kernel's soc15 macros expand it.
        assert_eq!(header(WRITE_DATA, 5), 0xC004_3700);
        assert_eq!(header(NOP, 1), 0xC000_1000);
        let h = header(WRITE_DATA, 5);
        assert!(is_type3(h) && opcode(h) == WRITE_DATA && body_dwords(h) == 5);
        assert!(!is_type3(0x8000_0000));
    }
}
