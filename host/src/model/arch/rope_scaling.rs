//! RoPE scaling as a file declares it (`{arch}.rope.scaling.*` and `rope_freqs.weight`), turned
//! into what every backend already applies: a multiplier of every global frequency, per-pair
//! frequency divisors, and a factor on the queries.
//!
//! - `linear`: every frequency times `1 / factor`.
//! - Llama 3.1's scaling: per-pair divisors stored in the file as `rope_freqs.weight`.
//! - `yarn` (Qwen2.5 and Qwen3 with long contexts, among others), as llama.cpp's `rope_yarn`
//!   computes it: pair `i` turns at `θ_i · (s·(1 − r_i) + r_i)` with `s = 1 / factor` and a ramp
//!   `r_i` that is 1 for the high-frequency pairs (kept as trained), 0 for the low-frequency
//!   ones (interpolated by `s`) and linear between the pairs whose wavelengths fit `beta_fast`
//!   and `beta_slow` turns into `original_context_length`; that is a per-pair divisor. Both
//!   rotations are also scaled by `mscale = attn_factor · (1 + 0.1 · ln factor)`, which
//!   multiplies every attention score by `mscale²`: applied here to the queries alone.
//! - LongRoPE (Phi-3's 128k variants, Phi-4 mini): per-pair divisors for contexts within the
//!   original length (`rope_factors_short.weight`) and beyond it (`rope_factors_long.weight`),
//!   and `rope.scaling.attn_factor` on both rotations (scores times its square). As llama.cpp
//!   does, the long factors apply where a sequence's context (the KV pool's tokens per
//!   sequence) exceeds the original length, the short ones otherwise: the program carries the
//!   short ones and [`RopeScaling::long`] the long ones (`Model::program_for_context` chooses).

use crate::model::gguf::GgufFile;
use anyhow::{bail, Result};

/// What the backends apply for a file's RoPE scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeScaling {
    /// Multiplier of every global frequency.
    pub freq_scale: f32,
    /// Divisor of each global frequency, one per rotated pair; empty for none.
    pub freq_divisors: Vec<f32>,
    /// Factor on the rotated elements of the queries after their norms, before RoPE (1
    /// without YaRN or LongRoPE): llama.cpp's RoPE scales the rotated elements of Q and K by
    /// the square root of it.
    pub query_scale: f32,
    /// LongRoPE's factors for sequences longer than its original context; `None` for files
    /// without LongRoPE.
    pub long: Option<LongFactors>,
}

/// LongRoPE's divisors for long sequences, which replace the program's (short) ones where a
/// sequence may hold more than `original_ctx` tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct LongFactors {
    /// `rope.scaling.original_context_length`: the longest context of the short factors.
    pub original_ctx: u32,
    /// `rope_factors_long.weight`, one divisor per rotated pair.
    pub divisors: Vec<f32>,
}

/// YaRN's parameters, with llama.cpp's defaults for the ones a file may leave out.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Yarn {
    factor: f32,
    original_ctx: f32,
    beta_fast: f32,
    beta_slow: f32,
    attn_factor: f32,
}

impl Yarn {
    /// The pair index (fractional) whose wavelength fits `turns` turns into the original
    /// context (`ggml_rope_yarn_corr_dim`).
    fn corr_dim(&self, rope_dim: u32, base: f32, turns: f32) -> f32 {
        rope_dim as f32 * (self.original_ctx / (turns * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
    }

    /// Per-pair divisors: `1 / (s·(1 − r_i) + r_i)`.
    fn divisors(&self, rope_dim: u32, base: f32) -> Vec<f32> {
        let low = self.corr_dim(rope_dim, base, self.beta_fast).floor().max(0.0);
        let high = self.corr_dim(rope_dim, base, self.beta_slow).ceil().min(rope_dim as f32 - 1.0);
        let s = 1.0 / self.factor;
        (0..rope_dim / 2)
            .map(|i| {
                let y = (i as f32 - low) / (high - low).max(0.001);
                let ramp = 1.0 - y.clamp(0.0, 1.0);
                1.0 / (s * (1.0 - ramp) + ramp)
            })
            .collect()
    }

    fn mscale(&self) -> f32 {
        self.attn_factor * (1.0 + 0.1 * self.factor.ln())
    }
}

/// Reads the file's RoPE scaling for `rope_dim` rotated elements of base `base`; kinds zinc
/// does not apply (LongRoPE, …) are refused, naming the key.
pub fn read(f: &GgufFile, arch: &str, rope_dim: u32, base: f32) -> Result<RopeScaling> {
    let key = |k: &str| format!("{arch}.{k}");
    let num = |k: &str| f.get_f64(&key(k)).ok().map(|v| v as f32);
    let positive = |k: &str, default: f32| -> Result<f32> {
        let v = num(k).unwrap_or(default);
        if !(v.is_finite() && v > 0.0) {
            bail!("{}: {} = {v} must be a positive number", f.path, key(k));
        }
        Ok(v)
    };
    let long = f.tensor("rope_factors_long.weight").is_some();
    if long != f.tensor("rope_factors_short.weight").is_some() {
        bail!(
            "{}: LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; the file has one",
            f.path
        );
    }
    if let Some(short) = factor_vector(f, "rope_factors_short.weight")? {
        let long = factor_vector(f, "rope_factors_long.weight")?.unwrap_or_default();
        if long.len() != short.len() {
            bail!(
                "{}: rope_factors_long.weight holds {} factors and rope_factors_short.weight {}; both need one per rotated pair",
                f.path,
                long.len(),
                short.len()
            );
        }
        let original = positive("rope.scaling.original_context_length", 0.0).map_err(|_| {
            anyhow::anyhow!("{}: LongRoPE factors need {}", f.path, key("rope.scaling.original_context_length"))
        })?;
        let attn = positive("rope.scaling.attn_factor", 1.0)?;
        return Ok(RopeScaling {
            freq_scale: 1.0,
            freq_divisors: short,
            query_scale: attn * attn,
            long: Some(LongFactors { original_ctx: original as u32, divisors: long }),
        });
    }
    let mut divisors = file_divisors(f)?;
    let (freq_scale, query_scale) = match f.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
        None | Some("none") => (1.0, 1.0),
        Some("linear") => (1.0 / positive("rope.scaling.factor", 1.0)?, 1.0),
        Some("yarn") => {
            let ctx = f.get(&key("context_length")).and_then(|v| v.as_u64()).unwrap_or(4096) as f32;
            let yarn = Yarn {
                factor: positive("rope.scaling.factor", 1.0)?,
                original_ctx: positive("rope.scaling.original_context_length", ctx)?,
                beta_fast: positive("rope.scaling.yarn_beta_fast", 32.0)?,
                beta_slow: positive("rope.scaling.yarn_beta_slow", 1.0)?,
                attn_factor: positive("rope.scaling.attn_factor", 1.0)?,
            };
            let ramp = yarn.divisors(rope_dim, base);
            divisors = if divisors.is_empty() {
                ramp
            } else if divisors.len() == ramp.len() {
                divisors.iter().zip(&ramp).map(|(a, b)| a * b).collect()
            } else {
                // Left for read_hparams to refuse with the pair count.
                divisors
            };
            (1.0, yarn.mscale() * yarn.mscale())
        }
        Some(kind) => bail!(
            "{}: {} = {kind} is not supported yet (zinc applies linear, yarn and Llama 3.1's rope_freqs)",
            f.path,
            key("rope.scaling.type")
        ),
    };
    Ok(RopeScaling { freq_scale, freq_divisors: divisors, query_scale, long: None })
}

/// Llama 3.1-style RoPE scaling: the per-pair frequency divisors in `rope_freqs.weight`, if
/// the file has them (llama.cpp's converter writes them from the model's `rope_scaling`).
fn file_divisors(f: &GgufFile) -> Result<Vec<f32>> {
    Ok(factor_vector(f, "rope_freqs.weight")?.unwrap_or_default())
}

/// A tensor of per-pair frequency divisors, if the file has it: positive f32 values.
fn factor_vector(f: &GgufFile, name: &str) -> Result<Option<Vec<f32>>> {
    let Some(t) = f.tensor(name) else { return Ok(None) };
    if t.dtype != zinc_formats::GgmlType::F32 || t.dims.len() != 1 {
        bail!("{}: {name} is {} of shape {:?}; expected a vector of f32", f.path, t.dtype, t.dims);
    }
    let factors: Vec<f32> = f.bytes(t).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if let Some(bad) = factors.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
        bail!("{}: {name} holds {bad}; factors must be positive", f.path);
    }
    Ok(Some(factors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{gguf::Value, gguf_write::GgufWriter};

    /// A phi3 file's metadata with LongRoPE factor sets of `short` and `long` pairs.
    fn longrope_file(short: usize, long: usize, original: Option<u32>) -> GgufFile {
        let factors = |n: usize| (0..n).flat_map(|i| (1.0 + i as f32).to_le_bytes()).collect::<Vec<u8>>();
        let mut w = GgufWriter::new();
        w.meta("general.architecture", Value::String("phi3".into()));
        if let Some(o) = original {
            w.meta("phi3.rope.scaling.original_context_length", Value::U32(o));
        }
        w.tensor("rope_factors_short.weight", &[short as u64], zinc_formats::GgmlType::F32, factors(short));
        w.tensor("rope_factors_long.weight", &[long as u64], zinc_formats::GgmlType::F32, factors(long));
        let bytes = w.to_bytes();
        let mut m = memmap2::MmapMut::map_anon(bytes.len()).unwrap();
        m.copy_from_slice(&bytes);
        GgufFile::parse(std::sync::Arc::new(m.make_read_only().unwrap()), "longrope.gguf").unwrap()
    }

    /// The long set comes with the original length it takes over from; sets of different
    /// lengths and a missing original length are refused, naming what is wrong.
    #[test]
    fn long_factors_are_read_with_their_original_context_and_checked() {
        let read = |f: &GgufFile| read(f, "phi3", 8, 10_000.0);
        let long = read(&longrope_file(4, 4, Some(1024))).unwrap().long.unwrap();
        assert_eq!(long, LongFactors { original_ctx: 1024, divisors: vec![1.0, 2.0, 3.0, 4.0] });
        let e = read(&longrope_file(4, 3, Some(1024))).unwrap_err().to_string();
        assert!(e.contains("rope_factors_long.weight holds 3 factors and rope_factors_short.weight 4"), "{e}");
        let e = read(&longrope_file(4, 4, None)).unwrap_err().to_string();
        assert!(e.contains("LongRoPE factors need phi3.rope.scaling.original_context_length"), "{e}");
    }

    /// The ramp keeps the fastest pairs as trained, divides the slowest by the factor, and
    /// moves monotonically between them, at the corners llama.cpp's formula gives for a
    /// 64-element rotation of base 10,000 trained on 2,048 positions (pairs 8 and 21).
    #[test]
    fn yarn_keeps_fast_pairs_and_interpolates_slow_ones() {
        let y = Yarn { factor: 4.0, original_ctx: 2048.0, beta_fast: 32.0, beta_slow: 1.0, attn_factor: 1.0 };
        let d = y.divisors(64, 10_000.0);
        assert_eq!(d.len(), 32);
        assert!(d[..=8].iter().all(|&v| v == 1.0), "{d:?}");
        assert!(d[21..].iter().all(|&v| (v - 4.0).abs() < 1e-6), "{d:?}");
        assert!(d.windows(2).all(|w| w[1] >= w[0]) && d[9] > 1.0 && d[20] < 4.0, "{d:?}");
        assert!((y.mscale() - (1.0 + 0.1 * 4f32.ln())).abs() < 1e-7);
    }
}
