//! Choosing the next token from logits: greedy, or temperature with top-k, top-p, min-p,
//! repetition, presence and frequency penalties, from a seeded generator.

use zinc_formats::random::Rng;

/// Sampling settings, as a request or the command line gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// 0 (or less) means greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1: all).
    pub top_p: f32,
    /// Drop tokens below `min_p × p(best)` (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recent tokens by this (1: off).
    pub repeat_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    pub repeat_last_n: usize,
    /// OpenAI presence penalty: subtracted once from every token already generated.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty: subtracted per occurrence.
    pub frequency_penalty: f32,
    /// Seed for the generator.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        SamplerConfig { temperature: 0.0, ..Default::default() }
    }
}

/// A sampler with its own generator state.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
}

/// Index of the largest logit (lowest index on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    /// A sampler for `cfg`.
    pub fn new(cfg: SamplerConfig) -> Sampler {
        let rng = Rng::new(cfg.seed);
        Sampler { cfg, rng }
    }

    /// Picks the next token. `history` is the sequence so far (prompt and output), `output`
    /// the generated part (for presence/frequency penalties).
    pub fn sample(&mut self, logits: &[f32], history: &[u32], output: &[u32]) -> u32 {
        let c = &self.cfg;
        let penalised = c.repeat_penalty != 1.0 || c.presence_penalty != 0.0 || c.frequency_penalty != 0.0;
        let mut owned;
        let logits = if penalised {
            owned = logits.to_vec();
            if c.repeat_penalty != 1.0 {
                let start = history.len().saturating_sub(c.repeat_last_n);
                let mut seen = std::collections::HashSet::new();
                for &t in &history[start..] {
                    if seen.insert(t) {
                        if let Some(l) = owned.get_mut(t as usize) {
                            *l = if *l > 0.0 { *l / c.repeat_penalty } else { *l * c.repeat_penalty };
                        }
                    }
                }
            }
            let mut counts = std::collections::HashMap::new();
            for &t in output {
                *counts.entry(t).or_insert(0u32) += 1;
            }
            for (t, n) in counts {
                if let Some(l) = owned.get_mut(t as usize) {
                    *l -= c.presence_penalty + c.frequency_penalty * n as f32;
                }
            }
            &owned[..]
        } else {
            logits
        };
        if c.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if c.top_k > 0 {
            cand.truncate(c.top_k);
        }
        let max = cand[0].1;
        let mut probs: Vec<f32> = cand.iter().map(|&(_, l)| ((l - max) / c.temperature).exp()).collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        let mut keep = probs.len();
        if c.min_p > 0.0 {
            let floor = probs[0] * c.min_p;
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        if c.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, p) in probs.iter().enumerate().take(keep) {
                acc += p;
                if acc >= c.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        let total: f32 = probs[..keep].iter().sum();
        let mut r = self.rng.f32() * total;
        for i in 0..keep {
            r -= probs[i];
            if r <= 0.0 {
                return cand[i].0;
            }
        }
        cand[keep - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, 3.0, -1.0], &[], &[]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_whatever_the_temperature() {
        let mut s = Sampler::new(SamplerConfig { temperature: 5.0, top_k: 1, ..Default::default() });
        for _ in 0..50 {
            assert_eq!(s.sample(&[0.0, 1.0, 0.5], &[], &[]), 1);
        }
    }

    #[test]
    fn same_seed_same_choices_and_min_p_drops_the_tail() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let cfg = SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, seed: 7, ..Default::default() };
        let (mut a, mut b) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
        let best = argmax(&logits) as usize;
        for _ in 0..200 {
            let t = a.sample(&logits, &[], &[]);
            assert_eq!(t, b.sample(&logits, &[], &[]));
            // min_p 0.5 at T=1: kept tokens are within ln 2 of the best logit.
            assert!(logits[best] - logits[t as usize] <= std::f32::consts::LN_2 + 1e-5);
        }
    }

    #[test]
    fn penalties_push_repeated_tokens_down() {
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, repeat_penalty: 2.0, ..Default::default() });
        assert_eq!(s.sample(&[2.0, 1.5], &[0], &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, frequency_penalty: 0.3, ..Default::default() });
        assert_eq!(s.sample(&[2.0, 1.5], &[], &[0, 0]), 1);
    }
}
