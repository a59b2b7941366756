//! ggml tensor types as GGUF stores them: id, name, block size and bytes per block.

/// One tensor type's storage facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeInfo {
    /// ggml type id.
    pub id: u32,
    /// ggml's name (`q4_0`).
    pub name: &'static str,
    /// Elements per block.
    pub block: usize,
    /// Bytes per block.
    pub bytes: usize,
}

/// Every type zinc reads. Sizes from ggml's `GGML_QUANT_SIZES`.
pub const TYPES: &[TypeInfo] = &[
    TypeInfo { id: 0, name: "f32", block: 1, bytes: 4 },
    TypeInfo { id: 1, name: "f16", block: 1, bytes: 2 },
    TypeInfo { id: 2, name: "q4_0", block: 32, bytes: 18 },
    TypeInfo { id: 3, name: "q4_1", block: 32, bytes: 20 },
    TypeInfo { id: 6, name: "q5_0", block: 32, bytes: 22 },
    TypeInfo { id: 7, name: "q5_1", block: 32, bytes: 24 },
    TypeInfo { id: 8, name: "q8_0", block: 32, bytes: 34 },
    TypeInfo { id: 9, name: "q8_1", block: 32, bytes: 40 },
    TypeInfo { id: 10, name: "q2_k", block: 256, bytes: 84 },
    TypeInfo { id: 11, name: "q3_k", block: 256, bytes: 110 },
    TypeInfo { id: 12, name: "q4_k", block: 256, bytes: 144 },
    TypeInfo { id: 13, name: "q5_k", block: 256, bytes: 176 },
    TypeInfo { id: 14, name: "q6_k", block: 256, bytes: 210 },
    TypeInfo { id: 15, name: "q8_k", block: 256, bytes: 292 },
    TypeInfo { id: 20, name: "iq4_nl", block: 32, bytes: 18 },
    TypeInfo { id: 23, name: "iq4_xs", block: 256, bytes: 136 },
    TypeInfo { id: 30, name: "bf16", block: 1, bytes: 2 },
];

/// Looks up a type by ggml id.
pub fn type_info(id: u32) -> Option<TypeInfo> {
    TYPES.iter().copied().find(|t| t.id == id)
}

/// Looks up a type by name (case-insensitive).
pub fn type_by_name(name: &str) -> Option<TypeInfo> {
    TYPES.iter().copied().find(|t| t.name.eq_ignore_ascii_case(name))
}

impl TypeInfo {
    /// Bytes for `n` elements, `None` when `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(&self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block as u64) {
            return None;
        }
        (n / self.block as u64).checked_mul(self.bytes as u64)
    }
}
