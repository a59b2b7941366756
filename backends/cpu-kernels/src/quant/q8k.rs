//! Activations quantized to 8 bits in 256-element super-blocks, for the K-quant kernels.
//!
//! K-quant weights carry one scale (and for some formats one minimum) per 16 or 32 elements
//! inside a 256-element super-block. Their dot products sum integer products per sub-block,
//! apply the sub-block's integer scale, and convert to float once per super-block; the
//! minimums need the activation's sum over each sub-block, kept here per 16 elements
//! (`bsums`), the same idea as ggml's Q8_K.

/// Elements per super-block.
pub const QK_K: usize = 256;

/// One activation row in 8-bit super-blocks: `x[j] ≈ d[j / 256] * qs[j]`.
#[derive(Debug, Clone, Default)]
pub struct Q8KRow {
    /// Scale per super-block.
    pub d: Vec<f32>,
    /// Σ qs over each run of 16 elements (16 per super-block).
    pub bsums: Vec<i16>,
    /// The quantized values.
    pub qs: Vec<i8>,
}

impl Q8KRow {
    /// Quantizes `x` (length a multiple of 256) into `self`, reusing its buffers.
    pub fn quantize_from(&mut self, x: &[f32]) {
        debug_assert_eq!(x.len() % QK_K, 0);
        let nb = x.len() / QK_K;
        self.d.resize(nb, 0.0);
        self.bsums.resize(nb * 16, 0);
        self.qs.resize(x.len(), 0);
        for (b, xs) in x.chunks_exact(QK_K).enumerate() {
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let qs = &mut self.qs[b * QK_K..(b + 1) * QK_K];
            for (q, &v) in qs.iter_mut().zip(xs) {
                *q = (v * id).round_ties_even() as i8;
            }
            for (s, run) in self.bsums[b * 16..(b + 1) * 16].iter_mut().zip(qs.chunks_exact(16)) {
                *s = run.iter().map(|&q| q as i16).sum();
            }
            self.d[b] = d;
        }
    }

    /// Quantizes a fresh row.
    pub fn new(x: &[f32]) -> Q8KRow {
        let mut r = Q8KRow::default();
        r.quantize_from(x);
        r
    }
}
