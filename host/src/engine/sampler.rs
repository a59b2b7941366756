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
        if c.top_p >= 1.0 && (c.top_k == 0 || c.top_k >= logits.len()) {
            return self.sample_unranked(logits);
        }
        let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if c.top_k > 0 && c.top_k < cand.len() {
            // Only the k best need ordering: a selection, then a sort of k (sorting a whole
            // 49,152-token vocabulary cost milliseconds per token, per stream).
            cand.select_nth_unstable_by(c.top_k - 1, order);
            cand.truncate(c.top_k);
        }
        cand.sort_unstable_by(order);
        self.draw_ranked(&cand)
    }

    /// Whether [`Sampler::sample_summary`] picks what [`Sampler::sample`] would from the whole
    /// row, given a summary of the row's `candidates` likeliest tokens of `n_vocab`: greedy, or
    /// a top-k within the candidates, with no penalty (penalties change which tokens rank).
    pub fn summary_suffices(&self, candidates: usize, n_vocab: usize) -> bool {
        let c = &self.cfg;
        let penalised = c.repeat_penalty != 1.0 || c.presence_penalty != 0.0 || c.frequency_penalty != 0.0;
        let ranked_within = c.top_k > 0 && c.top_k <= candidates && c.top_k < n_vocab;
        !penalised && (c.temperature <= 0.0 || ranked_within)
    }

    /// Picks the next token from a row's summary (`ids` and `logits`: its likeliest tokens,
    /// likeliest first, lower id first among equals), where [`Sampler::summary_suffices`]:
    /// the same token, and the same generator draws, as [`Sampler::sample`] on the whole row.
    pub fn sample_summary(&mut self, ids: &[u32], logits: &[f32]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return ids[0];
        }
        let k = self.cfg.top_k.min(ids.len());
        let cand: Vec<(u32, f32)> = ids[..k].iter().copied().zip(logits[..k].iter().copied()).collect();
        self.draw_ranked(&cand)
    }

    /// The draw over candidates sorted likeliest first: softmax at the temperature, then the
    /// min-p and top-p cuts.
    fn draw_ranked(&mut self, cand: &[(u32, f32)]) -> u32 {
        let c = &self.cfg;
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

    /// Sampling when no cut depends on rank (no top-k, no top-p): min-p is a threshold on
    /// the logit, so the whole vocabulary is walked in token order, unsorted. OpenAI's
    /// defaults land here; sorting 49,152 logits per token cost milliseconds per stream.
    fn sample_unranked(&mut self, logits: &[f32]) -> u32 {
        let c = &self.cfg;
        let max = logits.iter().copied().filter(|l| l.is_finite()).fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return argmax(logits);
        }
        // p / p_max >= min_p  ⇔  (l - max) / T >= ln(min_p).
        let floor = if c.min_p > 0.0 { max + c.temperature * c.min_p.ln() } else { f32::NEG_INFINITY };
        let weight = |l: f32| if l.is_finite() && l >= floor { ((l - max) / c.temperature).exp() } else { 0.0 };
        let total: f32 = logits.iter().map(|&l| weight(l)).sum();
        let mut r = self.rng.f32() * total;
        let mut last = argmax(logits);
        for (i, &l) in logits.iter().enumerate() {
            let w = weight(l);
            if w > 0.0 {
                last = i as u32;
                r -= w;
                if r <= 0.0 {
                    return i as u32;
                }
            }
        }
        last
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
    fn a_summary_samples_what_the_whole_row_does() {
        let logits: Vec<f32> = (0..5000).map(|i| ((i * 7919 % 1009) as f32) * 0.01).collect();
        let (ids, values, _) = zinc_plugin_api::summarise_row(&logits);
        let configs = [
            SamplerConfig::greedy(),
            SamplerConfig { top_k: 40, ..Default::default() },
            SamplerConfig { temperature: 1.3, top_k: 64, top_p: 0.5, min_p: 0.0, ..Default::default() },
            SamplerConfig { temperature: 0.7, top_k: 5, top_p: 1.0, min_p: 0.2, ..Default::default() },
        ];
        for (n, cfg) in configs.into_iter().enumerate() {
            let cfg = SamplerConfig { seed: n as u64, ..cfg };
            let (mut whole, mut summary) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
            assert!(summary.summary_suffices(ids.len(), logits.len()));
            for _ in 0..200 {
                assert_eq!(whole.sample(&logits, &[], &[]), summary.sample_summary(&ids, &values));
            }
        }
    }

    #[test]
    fn a_summary_does_not_suffice_for_penalties_or_a_wide_top_k() {
        let s = |cfg| Sampler::new(cfg).summary_suffices(64, 49_152);
        assert!(!s(SamplerConfig { top_k: 0, ..Default::default() }));
        assert!(!s(SamplerConfig { top_k: 65, ..Default::default() }));
        assert!(!s(SamplerConfig { repeat_penalty: 1.1, ..SamplerConfig::greedy() }));
        assert!(!s(SamplerConfig { presence_penalty: 0.5, top_k: 10, ..Default::default() }));
        assert!(s(SamplerConfig { top_k: 0, ..SamplerConfig::greedy() }));
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
    fn top_k_keeps_exactly_the_k_best_in_order() {
        // Ties at the k-th place are broken by the lower token id, as a full sort would.
        let logits: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 1000) as f32 * 0.01).collect();
        let mut want: Vec<u32> = (0..5000).collect();
        want.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
        want.truncate(12);
        let cfg = SamplerConfig { temperature: 1.0, top_k: 12, top_p: 1.0, min_p: 0.0, seed: 3, ..Default::default() };
        let mut s = Sampler::new(cfg);
        for _ in 0..300 {
            let t = s.sample(&logits, &[], &[]);
            assert!(want.contains(&t), "token {t} is not among the 12 best");
        }
    }

    #[test]
    fn unranked_sampling_follows_the_softmax_and_min_p() {
        // No top-k/top-p: the frequencies must follow softmax(l / T), and min-p must cut.
        let logits = [1.0f32, 2.0, 0.0, 2.5, -50.0];
        let cfg = SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 11, ..Default::default() };
        let mut s = Sampler::new(cfg.clone());
        let mut counts = [0u32; 5];
        let n = 20000;
        for _ in 0..n {
            counts[s.sample(&logits, &[], &[]) as usize] += 1;
        }
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        for (i, &l) in logits.iter().enumerate() {
            let want = l.exp() / z;
            let got = counts[i] as f32 / n as f32;
            assert!((got - want).abs() < 0.02, "token {i}: frequency {got:.3}, softmax {want:.3}");
        }
        // min_p 0.5 keeps tokens within ln 2 of the best logit (2.5): 2.0 and 2.5 only.
        let mut s = Sampler::new(SamplerConfig { min_p: 0.5, ..cfg });
        for _ in 0..500 {
            assert!(matches!(s.sample(&logits, &[], &[]), 1 | 3));
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
