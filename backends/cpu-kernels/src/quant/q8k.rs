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
    /// The quantized values plus 128, as unsigned bytes: the unsigned side of `dpbusd` for the
    /// prompt kernels whose weights are signed (`quant::x86_panel`).
    pub biased: Vec<u8>,
}

impl Q8KRow {
    /// Quantizes `x` (length a multiple of 256) into `self`, reusing its buffers.
    pub fn quantize_from(&mut self, x: &[f32]) {
        debug_assert_eq!(x.len() % QK_K, 0);
        let nb = x.len() / QK_K;
        self.d.resize(nb, 0.0);
        self.bsums.resize(nb * 16, 0);
        self.qs.resize(x.len(), 0);
        if !self.quantize_vector(x) {
            self.quantize_scalar(x);
        }
        self.biased.clear();
        self.biased.extend(self.qs.iter().map(|&q| q as u8 ^ 0x80));
    }

    /// [`Q8KRow::quantize_from`] with AVX2; `false` (nothing written) on CPUs without it.
    fn quantize_vector(&mut self, x: &[f32]) -> bool {
        #[cfg(target_arch = "x86_64")]
        if super::x86::float::available() {
            use super::x86::float::{abs_max, quantize_scaled};
            for (b, xs) in x.chunks_exact(QK_K).enumerate() {
                // SAFETY: AVX2 and FMA checked; every slice holds whole runs of 32.
                let d = unsafe { abs_max(xs) } / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                for (c, run) in xs.chunks_exact(32).enumerate() {
                    let at = b * QK_K + 32 * c;
                    // SAFETY: as above.
                    let (lo, hi) = unsafe { quantize_scaled(run, id, &mut self.qs[at..at + 32]) };
                    self.bsums[b * 16 + 2 * c] = lo as i16;
                    self.bsums[b * 16 + 2 * c + 1] = hi as i16;
                }
                self.d[b] = d;
            }
            return true;
        }
        let _ = x;
        false
    }

    /// [`Q8KRow::quantize_from`] in plain code: the reference for the vector path, and the
    /// path of CPUs without AVX2.
    fn quantize_scalar(&mut self, x: &[f32]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use zinc_formats::random::Rng;

    /// The vector path writes what the plain one does, bit for bit, including values that
    /// land on a tie and rows of zeros.
    #[test]
    fn vector_quantization_matches_the_plain_code() {
        let mut rng = Rng::new(7);
        let mut x: Vec<f32> = (0..4 * QK_K).map(|_| rng.sym(3.0)).collect();
        x[QK_K..2 * QK_K].fill(0.0);
        x[2 * QK_K] = 127.0;
        x[2 * QK_K + 1] = 0.5;
        x[2 * QK_K + 2] = -1.5;
        let (mut fast, mut plain) = (Q8KRow::default(), Q8KRow::default());
        fast.quantize_from(&x);
        plain.d.resize(4, 0.0);
        plain.bsums.resize(64, 0);
        plain.qs.resize(x.len(), 0);
        plain.quantize_scalar(&x);
        assert!(fast.biased.iter().zip(&fast.qs).all(|(&b, &q)| b as i32 == q as i32 + 128));
        assert_eq!((fast.d, fast.bsums, fast.qs), (plain.d, plain.bsums, plain.qs));
    }
}
