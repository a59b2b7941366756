//! The evidence every `zinc bench` of a backend other than the CPU tier carries: the logits of
//! one short prompt on that backend and on the CPU tier, compared. A backend whose kernels are
//! wrong measures an NMSE near 1; rounding differences (8-bit activations in other block
//! sizes, half-precision matrix units, summation order) stay orders of magnitude below the
//! bound, so a run that fails it is marked not comparable.

use crate::{
    engine::{open::open_for_model, sequence::Sequence},
    model::loaded::Model,
};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use zinc_plugin_api::BackendBox;

/// Prompt tokens whose logits are compared.
const TOKENS: u32 = 16;
/// NMSE of the logits above which the run is not comparable.
const BOUND: f64 = 1e-2;

/// One comparison with the CPU tier.
pub struct CpuCheck {
    /// Normalised mean squared error of the backend's logits against the CPU tier's.
    pub nmse: f64,
    /// Rows (of [`TOKENS`]) whose most likely token is the same on both.
    pub top1_agree: u32,
}

impl CpuCheck {
    /// Whether the backend's outputs agree with the CPU tier's within [`BOUND`].
    pub fn passed(&self) -> bool {
        self.nmse < BOUND
    }

    /// The check in the report's JSON.
    pub fn to_json(&self) -> Value {
        json!({"tokens": TOKENS, "nmse": self.nmse, "bound": BOUND, "top1_agree": self.top1_agree,
               "passed": self.passed()})
    }

    /// One line for the table output.
    pub fn summary(&self) -> String {
        format!(
            "checked against the CPU tier on {TOKENS} prompt tokens: logits NMSE {:.2e} (bound {BOUND:.0e}), top-1 agrees on {}/{TOKENS} rows: {}",
            self.nmse,
            self.top1_agree,
            if self.passed() { "comparable" } else { "NOT comparable" }
        )
    }
}

/// Feeds the same prompt to `backend` (already loaded with `model`) and to a CPU tier opened
/// for the purpose, and compares every row's logits.
pub fn run(config: Option<&Path>, model: &Model, backend: &mut BackendBox, vocab: u32) -> Result<CpuCheck> {
    let tokens = super::random_tokens(TOKENS, vocab, 7);
    let ctx = TOKENS + 16;
    let got = Sequence::new(0, ctx, 0).feed(backend, &tokens, TOKENS as usize, true)?;
    let (mut cpu, _) = open_for_model(config, Some("cpu"), model, ctx, 1)
        .context("zinc bench checks its backend against the CPU tier; pass --no-cpu-check to skip")?;
    let want = Sequence::new(0, ctx, 0).feed(&mut cpu.backend, &tokens, TOKENS as usize, true)?;
    Ok(compare(&got, &want, vocab as usize))
}

/// Compares logits rows of `vocab` values each.
fn compare(got: &[f32], want: &[f32], vocab: usize) -> CpuCheck {
    let err: f64 = got.iter().zip(want).map(|(g, w)| ((g - w) as f64).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| (*w as f64).powi(2)).sum();
    let argmax = |row: &[f32]| row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i);
    let top1_agree =
        got.chunks_exact(vocab).zip(want.chunks_exact(vocab)).filter(|(g, w)| argmax(g) == argmax(w)).count() as u32;
    let nmse = if got.len() != want.len() { f64::INFINITY } else { err / norm.max(1e-30) };
    CpuCheck { nmse, top1_agree }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_logits_pass_and_wrong_ones_do_not() {
        let want: Vec<f32> = (0..40).map(|i| (i as f32 * 0.7).sin()).collect();
        let close: Vec<f32> = want.iter().map(|v| v + 1e-3).collect();
        let c = compare(&close, &want, 10);
        assert!(c.passed() && c.top1_agree == 4, "{}", c.summary());
        let wrong: Vec<f32> = want.iter().rev().copied().collect();
        let w = compare(&wrong, &want, 10);
        assert!(!w.passed(), "{}", w.summary());
        assert!(w.summary().contains("NOT comparable"));
        // A backend that returned fewer rows is not comparable either.
        assert!(!compare(&want[..30], &want, 10).passed());
    }
}
