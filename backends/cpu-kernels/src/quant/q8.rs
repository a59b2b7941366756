//! Activations quantized to 8 bits, once per matmul input, in blocks of 32.

/// One activation row in 8-bit blocks of 32: `x[j] ≈ d[j / 32] * qs[j]`.
#[derive(Debug, Clone, Default)]
pub struct Q8Row {
    /// Scale per block.
    pub d: Vec<f32>,
    /// `d * Σ qs` per block (the term that carries weight offsets and minimums).
    pub s: Vec<f32>,
    /// The quantized values.
    pub qs: Vec<i8>,
}

impl Q8Row {
    /// Quantizes `x` (length a multiple of 32) into `self`, reusing its buffers.
    pub fn quantize_from(&mut self, x: &[f32]) {
        debug_assert_eq!(x.len() % 32, 0);
        let nb = x.len() / 32;
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.qs.resize(x.len(), 0);
        #[cfg(target_arch = "x86_64")]
        if super::x86::float::available() {
            for (b, xs) in x.chunks_exact(32).enumerate() {
                // SAFETY: AVX2 and FMA checked; both slices hold 32 elements.
                let (d, sum) = unsafe { super::x86::float::quantize_block(xs, &mut self.qs[b * 32..b * 32 + 32]) };
                self.d[b] = d;
                self.s[b] = d * sum as f32;
            }
            return;
        }
        for (b, xs) in x.chunks_exact(32).enumerate() {
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in self.qs[b * 32..b * 32 + 32].iter_mut().zip(xs) {
                let r = (v * id).round_ties_even() as i32;
                *q = r as i8;
                sum += r;
            }
            self.d[b] = d;
            self.s[b] = d * sum as f32;
        }
    }

    /// Quantizes a fresh row.
    pub fn new(x: &[f32]) -> Q8Row {
        let mut r = Q8Row::default();
        r.quantize_from(x);
        r
    }
}
