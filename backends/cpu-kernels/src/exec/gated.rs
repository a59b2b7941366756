//! The gated feed-forward activations, `out = act(gate) · up`: SwiGLU's SiLU and Gemma's GELU
//! in its tanh form. Both are `g · σ(z)` for a `z` of `g` (SiLU: `z = g`; GELU-tanh:
//! `x/2 · (1 + tanh(y)) = x · σ(2y)`, `y = √(2/π) · (x + 0.044715 x³)`), so one kernel with one
//! exponential serves both. The exponential is a polynomial (Cephes' `expf`: range reduction
//! by ln 2, a degree-6 polynomial, about 1 ulp), evaluated the same way, fused multiply-add
//! for fused multiply-add, by the scalar code and the AVX2 code: every element gets the same
//! bits whichever path takes it. libm's `tanhf` and `expf`, called per element, were a fifth
//! of a Gemma 3 prompt's time on the CPU tier.

/// The gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `g · σ(g)` (SwiGLU).
    Silu,
    /// `g/2 · (1 + tanh(√(2/π) · (g + 0.044715 g³)))` (ggml's `gelu`, Gemma's GeGLU).
    GeluTanh,
}

/// `2·√(2/π)` and `2·√(2/π)·0.044715`: GELU-tanh's `z = g · (C1 + C3 · g²)`.
const GELU_C1: f32 = 1.595_769;
const GELU_C3: f32 = 0.071_354_82;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Inputs of the exponential are clamped here, so that `2^n` stays a normal number.
const EXP_MIN: f32 = -87.0;
const EXP_MAX: f32 = 88.0;
/// Cephes' `expf` polynomial, highest degree first: `e^r ≈ 1 + r + r² · P(r)`.
const EXP_P: [f32; 6] = [1.987_569_2e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];

/// `out[i] = act(gate[i]) · up[i]`, where an operand given as `None` is `out` itself.
pub fn gated(out: &mut [f32], gate: Option<&[f32]>, up: Option<&[f32]>, act: Gate) {
    let n = out.len();
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::quant::x86::float::available() {
        // SAFETY: AVX2 and FMA checked; every slice holds n values.
        done = unsafe { avx2::gated(out, gate, up, act) };
    }
    for i in done..n {
        let g = gate.map_or(out[i], |a| a[i]);
        let u = up.map_or(out[i], |b| b[i]);
        out[i] = activate(g, act) * u;
    }
}

/// `act(g)` for one value, the scalar twin of the AVX2 code.
pub fn activate(g: f32, act: Gate) -> f32 {
    let z = match act {
        Gate::Silu => g,
        Gate::GeluTanh => g * GELU_C3.mul_add(g * g, GELU_C1),
    };
    g / (1.0 + exp(-z))
}

/// `e^x` by the polynomial, for `x` clamped to [EXP_MIN, EXP_MAX].
fn exp(x: f32) -> f32 {
    let x = x.clamp(EXP_MIN, EXP_MAX);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p = EXP_P[0];
    for c in &EXP_P[1..] {
        p = p.mul_add(r, *c);
    }
    let e = p.mul_add(r * r, r + 1.0);
    e * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// The vector part of [`super::gated`]: whole groups of eight values (an operand given as
    /// `None` is `out`). Returns how many values it wrote.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn gated(out: &mut [f32], gate: Option<&[f32]>, up: Option<&[f32]>, act: Gate) -> usize {
        let n = out.len() / 8 * 8;
        let o = out.as_mut_ptr();
        let at = |x: Option<&[f32]>, i: usize| x.map_or(o.add(i) as *const f32, |x| x.as_ptr().add(i));
        for i in (0..n).step_by(8) {
            let g = _mm256_loadu_ps(at(gate, i));
            let u = _mm256_loadu_ps(at(up, i));
            _mm256_storeu_ps(o.add(i), _mm256_mul_ps(activate(g, act), u));
        }
        n
    }

    /// [`super::activate`] on eight values.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn activate(g: __m256, act: Gate) -> __m256 {
        let z = match act {
            Gate::Silu => g,
            Gate::GeluTanh => {
                _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_set1_ps(GELU_C3), _mm256_mul_ps(g, g), _mm256_set1_ps(GELU_C1)))
            }
        };
        let e = exp(_mm256_sub_ps(_mm256_setzero_ps(), z));
        _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }

    /// [`super::exp`] on eight values.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp(x: __m256) -> __m256 {
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)), _mm256_set1_ps(EXP_MAX));
        let n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        let neg = _mm256_sub_ps(_mm256_setzero_ps(), n);
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(LN2_LO), _mm256_fmadd_ps(neg, _mm256_set1_ps(LN2_HI), x));
        let mut p = _mm256_set1_ps(EXP_P[0]);
        for c in &EXP_P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let e = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0)));
        let scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        _mm256_mul_ps(e, _mm256_castsi256_ps(scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(g: f64, act: Gate) -> f64 {
        match act {
            Gate::Silu => g / (1.0 + (-g).exp()),
            Gate::GeluTanh => {
                0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g)).tanh())
            }
        }
    }

    /// Within a few ulp of the activation computed in double precision, over the range
    /// activations take and far past it (where the exponential's clamp holds).
    #[test]
    fn activations_match_double_precision() {
        for act in [Gate::Silu, Gate::GeluTanh] {
            let mut worst = 0f64;
            for i in -40_000..=40_000 {
                let g = i as f32 * 5e-4 * (1.0 + (i as f32).abs() * 1e-4);
                let (got, want) = (activate(g, act) as f64, reference(g as f64, act));
                let err = (got - want).abs() / (want.abs() + 1e-30).max(1e-6);
                worst = worst.max(err);
            }
            assert!(worst < 2e-6, "{act:?}: worst relative error {worst:.2e}");
            for g in [-1e4f32, -200.0, -90.0, 90.0, 200.0, 1e4] {
                let (got, want) = (activate(g, act) as f64, reference(g as f64, act));
                assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{act:?}({g}) = {got}, not {want}");
            }
        }
    }

    /// The known values of the tanh form (Python's `math.tanh`, double precision).
    #[test]
    fn gelu_tanh_matches_known_values() {
        for (x, want) in [
            (-3.0, -0.003_637_392),
            (-1.0, -0.158_808),
            (0.0, 0.0),
            (0.5, 0.345_714),
            (1.0, 0.841_192),
            (2.0, 1.954_598),
        ] {
            let got = activate(x, Gate::GeluTanh);
            assert!((got - want).abs() < 2e-6, "gelu({x}) = {got} not {want}");
        }
    }

    /// Every element gets the same bits from the vector code as from the scalar code, with the
    /// up operand given or in place.
    #[test]
    fn the_vector_code_gives_the_scalar_bits() {
        let mut rng = zinc_formats::random::Rng::new(7);
        let gate: Vec<f32> = (0..1003).map(|i| rng.sym(if i % 7 == 0 { 60.0 } else { 6.0 })).collect();
        let up: Vec<f32> = (0..1003).map(|_| rng.sym(2.0)).collect();
        for act in [Gate::Silu, Gate::GeluTanh] {
            let want: Vec<u32> = gate.iter().zip(&up).map(|(&g, &u)| (activate(g, act) * u).to_bits()).collect();
            let mut out = vec![0f32; gate.len()];
            gated(&mut out, Some(&gate), Some(&up), act);
            assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "{act:?}");
            let mut in_place = up.clone();
            gated(&mut in_place, Some(&gate), None, act);
            assert_eq!(in_place.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "{act:?} into up");
            let mut in_place = gate.clone();
            gated(&mut in_place, None, Some(&up), act);
            assert_eq!(in_place.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "{act:?} into gate");
        }
    }
}
