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
//! * the extra time of a step's prefill against its weighted tokens (a token deep in its
//!   prompt weighs more, see `EngineConfig::attention_equiv`), as a line: a fixed part plus
//!   a part per token.
//!
//! A step with decodes then takes at most as many prefill tokens as the per-token part fits
//! in `(slowdown − 1) × decode-only step`. Chunk size trades the running streams' gaps
//! against the long prompt's own time to first token; `zinc serve --step-slowdown` sets it.
//! The fixed part is not charged: where a step's prefill has a large fixed cost (a GPU's
//! matrix tiles sized for many rows, attention over a long context), charging it cuts every
//! chunk to the minimum and multiplies the steps that pay it. On a CPU the fixed part is near
//! zero and this is a cost per token.
//!
//! Two more measurements serve priority: the duration of steps that compute an interactive
//! prompt, and a line through decode-only step times against their rows. While interactive
//! tenants are active, a batch step takes only as many decodes as fit in one interactive
//! prompt's step, so an interactive prompt never waits behind a long batch step. Where rows
//! are nearly free (a GPU's decode), that cap is far above any batch and changes nothing.

/// Running averages of step cost.
#[derive(Debug, Default, Clone)]
pub struct StepCost {
    decode_step: Option<f64>,
    /// Prefill time beyond a step's decodes against its weighted tokens.
    prefill_line: Line,
    /// Decode-only step time against its rows.
    decode_line: Line,
    /// Steps that computed an interactive prompt.
    interactive_step: Option<f64>,
}

/// A line `secs ≈ a + b · x` fitted by least squares over recent steps (older steps weigh
/// less): x is the decode rows of decode-only steps, or the weighted prefill tokens of
/// steps with prefill.
#[derive(Debug, Default, Clone)]
struct Line {
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl Line {
    /// Weight kept by older observations at each new one.
    const KEEP: f64 = 0.95;

    fn add(&mut self, x: f64, y: f64) {
        let k = Self::KEEP;
        (self.w, self.x, self.y, self.xx, self.xy) =
            (k * self.w + 1.0, k * self.x + x, k * self.y + y, k * self.xx + x * x, k * self.xy + x * y);
    }

    /// (a, b), both non-negative; with a single x seen, all cost is per unit of x.
    fn fit(&self) -> Option<(f64, f64)> {
        if self.w <= 0.0 || self.x <= 0.0 {
            return None;
        }
        let det = self.w * self.xx - self.x * self.x;
        if det <= 1e-9 * self.w * self.xx {
            return Some((0.0, self.y / self.x));
        }
        let b = ((self.w * self.xy - self.x * self.y) / det).max(0.0);
        let a = ((self.y - b * self.x) / self.w).max(0.0);
        Some((a, b))
    }
}

/// Weight of the newest observation in each average.
const NEWEST: f64 = 0.2;

fn average(old: Option<f64>, v: f64) -> Option<f64> {
    Some(old.map_or(v, |o| o + NEWEST * (v - o)))
}

impl StepCost {
    /// Records a step: how many decode rows it carried, its weighted prefill tokens, whether
    /// it computed an interactive prompt, and how long it took.
    pub fn observe(&mut self, decodes: usize, prefill_weight: f64, interactive_prompt: bool, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        if interactive_prompt {
            self.interactive_step = average(self.interactive_step, secs);
        }
        if prefill_weight <= 0.0 {
            if decodes > 0 {
                self.decode_step = average(self.decode_step, secs);
                self.decode_line.add(decodes as f64, secs);
            }
            return;
        }
        // Steps with prefill: the time beyond their decodes against their weighted tokens.
        let base = if decodes > 0 { self.decode_step.unwrap_or(0.0) } else { 0.0 };
        self.prefill_line.add(prefill_weight, (secs - base).max(0.0));
    }

    /// The average time of a decode-only step, once one was seen.
    pub fn decode_step(&self) -> Option<f64> {
        self.decode_step
    }

    /// Weighted prefill tokens a step with decodes may carry so that its per-token prefill
    /// time is about `slowdown − 1` decode-only steps; `None` while either cost is unknown,
    /// when prefill has no measurable per-token cost, or when `slowdown` is 0 (no time
    /// limit). Always at least one token, so prefill progresses.
    pub fn prefill_allowance(&self, slowdown: f64) -> Option<u32> {
        if slowdown <= 0.0 {
            return None;
        }
        let d = self.decode_step?;
        let (_, per_token) = self.prefill_line.fit()?;
        if per_token <= 0.0 {
            return None;
        }
        let tokens = (slowdown - 1.0).max(0.0) * d / per_token;
        Some(tokens.round().clamp(1.0, u32::MAX as f64) as u32)
    }
}

impl StepCost {
    /// Batch decodes a step may carry while interactive tenants are active, so that it takes
    /// about as long as a step computing an interactive prompt: an interactive prompt that
    /// arrives mid-step then waits at most about its own step time. `None` while unmeasured.
    pub fn batch_rows_allowance(&self) -> Option<usize> {
        let target = self.interactive_step?;
        let (a, b) = self.decode_line.fit()?;
        if b <= 0.0 {
            return None;
        }
        Some(((target - a) / b + 1e-9).floor().clamp(1.0, 1e6) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowance_follows_the_measured_costs() {
        let mut c = StepCost::default();
        assert_eq!(c.prefill_allowance(2.0), None, "nothing measured yet");
        c.observe(4, 0.0, false, 0.010);
        assert_eq!(c.prefill_allowance(2.0), None, "prefill cost still unknown");
        // 100 weighted tokens beside four decodes took 10 ms more than the decodes alone.
        c.observe(4, 100.0, false, 0.020);
        assert_eq!(c.prefill_allowance(2.0), Some(100));
        assert_eq!(c.prefill_allowance(3.0), Some(200));
        assert_eq!(c.prefill_allowance(0.0), None, "0 switches the limit off");
        assert_eq!(c.prefill_allowance(1.0), Some(1), "prefill always progresses");
        // Slower prefill (a deeper prompt) shrinks the allowance.
        for _ in 0..200 {
            c.observe(4, 100.0, false, 0.030);
        }
        assert_eq!(c.prefill_allowance(2.0), Some(50));
        // Bad clocks are ignored.
        c.observe(4, 100.0, false, f64::NAN);
        assert_eq!(c.prefill_allowance(2.0), Some(50));
    }

    #[test]
    fn a_fixed_prefill_cost_is_not_charged_to_the_allowance() {
        // A GPU-like device: decode steps take 2 ms; prefill beside them costs 4 ms whatever
        // the chunk plus 0.02 ms per weighted token.
        let mut g = StepCost::default();
        g.observe(4, 0.0, false, 0.002);
        for w in [16.0, 40.0, 16.0, 128.0, 64.0, 16.0, 100.0] {
            g.observe(4, w, false, 0.002 + 0.004 + 0.00002 * w);
        }
        // (2 − 1) × 2 ms at 0.02 ms per token: 100 tokens. Charging the fixed 4 ms would
        // have left none, so every chunk would be the minimum.
        assert_eq!(g.prefill_allowance(2.0), Some(100));
        // A step's cost that does not grow with its tokens sets no limit.
        let mut flat = StepCost::default();
        flat.observe(4, 0.0, false, 0.002);
        for w in [16.0, 64.0, 128.0] {
            flat.observe(4, w, false, 0.006);
        }
        assert_eq!(flat.prefill_allowance(2.0), None);
    }

    #[test]
    fn batch_rows_fit_in_an_interactive_step() {
        let mut c = StepCost::default();
        // Decode steps cost 2 ms plus 1.5 ms per row.
        for rows in [4usize, 8, 16, 12, 6] {
            c.observe(rows, 0.0, false, 0.002 + 0.0015 * rows as f64);
        }
        assert_eq!(c.batch_rows_allowance(), None, "no interactive step measured yet");
        c.observe(0, 20.0, true, 0.0125);
        // (12.5 ms − 2 ms) / 1.5 ms = 7 rows.
        assert_eq!(c.batch_rows_allowance(), Some(7));
        // A device where rows are nearly free (a GPU): the cap is far above any batch.
        let mut g = StepCost::default();
        for rows in [1usize, 8, 16, 32] {
            g.observe(rows, 0.0, false, 0.0013 + 0.00001 * rows as f64);
        }
        g.observe(0, 40.0, true, 0.002);
        assert!(g.batch_rows_allowance().unwrap() >= 60);
    }
}
