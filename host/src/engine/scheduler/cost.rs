//! What steps cost, measured as they run, so that prefill chunks beside running decodes can
//! be sized in time rather than in tokens.
//!
//! A token budget alone bounds a step's tokens, not its duration: on two CPU cores a
//! 128-token chunk deep in a long prompt took 0.5 s while a step of four decodes took 10 ms,
//! so the streams beside a long prompt saw gaps fifty times their usual. Sarathi-Serve sizes
//! chunks from a latency target measured offline; here the engine keeps two running averages
//! instead (any backend, any model, no profiling pass):
//!
//! * the duration of a step that carries only decodes, and
//! * the extra time per weighted prefill token (a token deep in its prompt weighs more, see
//!   `EngineConfig::attention_equiv`) in steps that carry prefill.
//!
//! A step with decodes then takes at most as many prefill tokens as fit in
//! `(slowdown − 1) × decode-only step`. Chunk size trades the running streams' gaps against
//! the long prompt's own time to first token; `zinc serve --step-slowdown` sets it.

/// Running averages of step cost.
#[derive(Debug, Default, Clone)]
pub struct StepCost {
    decode_step: Option<f64>,
    prefill_token: Option<f64>,
}

/// Weight of the newest observation in each average.
const NEWEST: f64 = 0.2;

fn average(old: Option<f64>, v: f64) -> Option<f64> {
    Some(old.map_or(v, |o| o + NEWEST * (v - o)))
}

impl StepCost {
    /// Records a step: how many decode rows it carried, its weighted prefill tokens, and how
    /// long it took.
    pub fn observe(&mut self, decodes: usize, prefill_weight: f64, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        if prefill_weight <= 0.0 {
            if decodes > 0 {
                self.decode_step = average(self.decode_step, secs);
            }
            return;
        }
        // Steps with prefill: the time beyond their decodes, per weighted token. A step of a
        // few tokens also carries the step's fixed cost, which errs towards smaller chunks.
        let base = if decodes > 0 { self.decode_step.unwrap_or(0.0) } else { 0.0 };
        self.prefill_token = average(self.prefill_token, ((secs - base) / prefill_weight).max(0.0));
    }

    /// Weighted prefill tokens a step with decodes may carry so that it takes about
    /// `slowdown` times a decode-only step; `None` while either average is unknown or when
    /// `slowdown` is 0 (no time limit). Always at least one token, so prefill progresses.
    pub fn prefill_allowance(&self, slowdown: f64) -> Option<u32> {
        if slowdown <= 0.0 {
            return None;
        }
        let (d, p) = (self.decode_step?, self.prefill_token?);
        let tokens = (slowdown - 1.0).max(0.0) * d / p.max(1e-9);
        Some(tokens.round().clamp(1.0, u32::MAX as f64) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowance_follows_the_measured_costs() {
        let mut c = StepCost::default();
        assert_eq!(c.prefill_allowance(2.0), None, "nothing measured yet");
        c.observe(4, 0.0, 0.010);
        assert_eq!(c.prefill_allowance(2.0), None, "prefill cost still unknown");
        // 100 weighted tokens beside four decodes took 10 ms more than the decodes alone.
        c.observe(4, 100.0, 0.020);
        assert_eq!(c.prefill_allowance(2.0), Some(100));
        assert_eq!(c.prefill_allowance(3.0), Some(200));
        assert_eq!(c.prefill_allowance(0.0), None, "0 switches the limit off");
        assert_eq!(c.prefill_allowance(1.0), Some(1), "prefill always progresses");
        // Slower prefill (a deeper prompt) shrinks the allowance.
        for _ in 0..50 {
            c.observe(4, 100.0, 0.030);
        }
        assert_eq!(c.prefill_allowance(2.0), Some(50));
        // Bad clocks are ignored.
        c.observe(4, 100.0, f64::NAN);
        assert_eq!(c.prefill_allowance(2.0), Some(50));
    }
}
