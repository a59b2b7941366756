//! ggml tensor types as GGUF stores them: one enum, and every fact about a type read from it.
//!
//! [`GgmlType`] is the one table: its ids are ggml's, its block sizes come from the block
//! structs in [`crate::blocks`] (whose sizes are checked at compile time against ggml's), and
//! every crate that needs to know something about a type asks it here.

use crate::blocks::*;
use std::{fmt, mem::size_of};

/// A tensor storage type zinc reads, with ggml's type id as its discriminant.
///
/// Q8_1 (id 9) is absent on purpose: ggml uses it for activations only and no GGUF file
/// stores it.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
}

/// How a type groups its elements, which decides the kernels that can read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// One element per "block": F32, F16, BF16.
    Scalar,
    /// Blocks of 32 elements with one scale (and maybe a minimum): Q4_0 … Q8_0, IQ4_NL.
    Block32,
    /// Super-blocks of 256 with per-sub-block scales: the K-quants and IQ4_XS.
    SuperBlock,
}

impl GgmlType {
    /// Every type, in id order.
    pub const ALL: [GgmlType; 16] = {
        use GgmlType::*;
        [F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, BF16]
    };

    /// ggml's type id, as GGUF stores it.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The type with ggml id `id`, `None` when zinc does not read it.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The type named `name` (ggml's lower-case name, any case), `None` when unknown.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// ggml's name (`q4_0`), as `zinc synth --type` and error messages spell it.
    pub const fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q2_K => "q2_k",
            Q3_K => "q3_k",
            Q4_K => "q4_k",
            Q5_K => "q5_k",
            Q6_K => "q6_k",
            Q8_K => "q8_k",
            IQ4_NL => "iq4_nl",
            IQ4_XS => "iq4_xs",
            BF16 => "bf16",
        }
    }

    /// How the type groups its elements.
    pub const fn grouping(self) -> Grouping {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 => Grouping::Scalar,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL => Grouping::Block32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ4_XS => Grouping::SuperBlock,
        }
    }

    /// Elements per block.
    pub const fn block_elements(self) -> usize {
        match self.grouping() {
            Grouping::Scalar => 1,
            Grouping::Block32 => QK,
            Grouping::SuperBlock => QK_K,
        }
    }

    /// Bytes per block: the size of the type's block struct.
    pub const fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => size_of::<f32>(),
            F16 | BF16 => size_of::<Half>(),
            Q4_0 => size_of::<BlockQ4_0>(),
            Q4_1 => size_of::<BlockQ4_1>(),
            Q5_0 => size_of::<BlockQ5_0>(),
            Q5_1 => size_of::<BlockQ5_1>(),
            Q8_0 => size_of::<BlockQ8_0>(),
            Q2_K => size_of::<BlockQ2K>(),
            Q3_K => size_of::<BlockQ3K>(),
            Q4_K => size_of::<BlockQ4K>(),
            Q5_K => size_of::<BlockQ5K>(),
            Q6_K => size_of::<BlockQ6K>(),
            Q8_K => size_of::<BlockQ8K>(),
            IQ4_NL => size_of::<BlockIQ4NL>(),
            IQ4_XS => size_of::<BlockIQ4XS>(),
        }
    }

    /// True for the K-quants (Q2_K to Q6_K; Q8_K is their activation format).
    pub const fn is_k_quant(self) -> bool {
        use GgmlType::*;
        matches!(self, Q2_K | Q3_K | Q4_K | Q5_K | Q6_K)
    }

    /// Bytes in a row of `n` elements, `None` when `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        n.is_multiple_of(self.block_elements()).then(|| n / self.block_elements() * self.block_bytes())
    }

    /// Bytes for `n` elements (a whole tensor), `None` when `n` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let block = self.block_elements() as u64;
        if !n.is_multiple_of(block) {
            return None;
        }
        (n / block).checked_mul(self.block_bytes() as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl TryFrom<u32> for GgmlType {
    type Error = UnknownType;
    fn try_from(id: u32) -> Result<GgmlType, UnknownType> {
        GgmlType::from_id(id).ok_or(UnknownType(id))
    }
}

/// A ggml type id zinc does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownType(pub u32);

impl fmt::Display for UnknownType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
        write!(f, "unsupported type id {} (zinc reads {})", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownType {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(&t.name().to_uppercase()), Some(t));
        }
        assert_eq!(GgmlType::from_id(9), None, "Q8_1 is not a storage type");
        assert!(GgmlType::ALL.windows(2).all(|w| w[0].id() < w[1].id()));
    }

    /// ggml's `GGML_QUANT_SIZES` (block elements, bytes), spelled out independently of the
    /// structs so that a mistyped field fails here.
    #[test]
    fn sizes_match_ggml() {
        use GgmlType::*;
        let ggml = [
            (F32, 1, 4),
            (F16, 1, 2),
            (Q4_0, 32, 18),
            (Q4_1, 32, 20),
            (Q5_0, 32, 22),
            (Q5_1, 32, 24),
            (Q8_0, 32, 34),
            (Q2_K, 256, 84),
            (Q3_K, 256, 110),
            (Q4_K, 256, 144),
            (Q5_K, 256, 176),
            (Q6_K, 256, 210),
            (Q8_K, 256, 292),
            (IQ4_NL, 32, 18),
            (IQ4_XS, 256, 136),
            (BF16, 1, 2),
        ];
        assert_eq!(ggml.len(), GgmlType::ALL.len());
        for (t, block, bytes) in ggml {
            assert_eq!((t.block_elements(), t.block_bytes()), (block, bytes), "{t}");
        }
        assert_eq!(Q4_K.row_bytes(512), Some(288));
        assert_eq!(Q4_K.row_bytes(100), None);
        assert_eq!(Q8_0.bytes_for(u64::MAX / 32 * 32), None, "34 bytes per 32 elements overflows");
    }
}
