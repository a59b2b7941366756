//! Weight tensors as the CPU tier sees them: borrowed bytes from the host's memory map,
//! with shapes checked once at load time.

use crate::quant::{packed::Packed, Activations, KQuantActivations};
use zinc_formats::GgmlType;
use zinc_plugin_api::{PluginError, PluginResult, TensorDesc};

/// One weight tensor, read in place from the host's map.
pub struct Weight {
    /// GGUF name, for messages.
    pub name: String,
    /// Storage type.
    pub dtype: GgmlType,
    /// Dimensions, fastest-varying first.
    pub dims: Vec<u64>,
    data: *const u8,
    len: usize,
    row_bytes: usize,
    /// The rows repacked four to a group for the matrix kernels, when the type allows
    /// ([`Weight::pack`]); the borrowed bytes above stay in use for everything else.
    pub packed: Option<Packed>,
    /// Whether prompt-sized products of this weight may go through weight panels
    /// ([`crate::quant::panel`]).
    pub panels: bool,
    /// The form activation rows take to meet these rows.
    pub acts: Activations,
}

// SAFETY: the bytes are a read-only map the host keeps alive as long as the backend.
unsafe impl Send for Weight {}
unsafe impl Sync for Weight {}

impl Weight {
    /// Checks a tensor description and adopts its bytes.
    pub fn adopt(t: &TensorDesc, k: KQuantActivations) -> PluginResult<Weight> {
        let dims: Vec<u64> = t.dims.iter().copied().collect();
        let name = t.name.to_string();
        let row_len = *dims.first().ok_or_else(|| PluginError::invalid(format!("tensor {name} has no dimensions")))?;
        let dtype = GgmlType::try_from(t.dtype.0)
            .map_err(|e| PluginError::unsupported(format!("tensor {name}: {e}, not by the cpu backend")))?;
        let rb = dtype.row_bytes(row_len as usize).ok_or_else(|| {
            PluginError::invalid(format!(
                "tensor {name}: rows of {row_len} elements are not whole {}-element blocks of {dtype}",
                dtype.block_elements()
            ))
        })?;
        let rows: u64 = dims[1..].iter().product();
        if (rb as u64).checked_mul(rows) != Some(t.len as u64) || t.data.is_null() {
            return Err(PluginError::invalid(format!(
                "tensor {name}: {} bytes do not match its shape {dims:?}",
                t.len
            )));
        }
        let acts = Activations::for_weights(dtype, k);
        Ok(Weight { name, dtype, dims, data: t.data, len: t.len, row_bytes: rb, packed: None, panels: true, acts })
    }

    /// Repacks the rows four to a group ([`Packed`]) if the type has that layout. Costs a copy
    /// of the tensor in memory; done once at load for tensors that matrix products read.
    pub fn pack(&mut self) {
        if self.packed.is_none() {
            self.packed = Packed::pack(self.dtype, self.bytes(), self.rows(), self.row_len());
        }
    }

    /// All bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: see the Send/Sync note; length checked in `adopt`.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }

    /// Elements per row.
    pub fn row_len(&self) -> usize {
        self.dims[0] as usize
    }

    /// Rows (all dimensions after the first, multiplied).
    pub fn rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }

    /// Row `i`'s bytes.
    pub fn row(&self, i: usize) -> &[u8] {
        &self.bytes()[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// The whole tensor as f32 (for small vectors such as norm weights).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.row_len() * self.rows()];
        for (i, o) in out.chunks_exact_mut(self.row_len()).enumerate() {
            zinc_formats::dequant::dequantize_row(self.dtype, self.row(i), o);
        }
        out
    }
}
