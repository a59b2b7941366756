//! Log-probabilities of tokens under the model, for the API's `logprobs` (generated tokens)
//! and `echo` (prompt tokens scored, as evaluation harnesses ask).
//!
//! They come from the model's raw logits — before temperature, penalties, top-k/top-p and any
//! grammar mask — so they describe the model, not the sampler (vLLM's default, and what
//! OpenAI documents). The normaliser is summed in f64 over the whole vocabulary.

/// Most alternatives a request may ask for per token (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// One token's log-probability and the likeliest tokens at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token.
    pub token: u32,
    /// Its natural-log probability.
    pub logprob: f32,
    /// The `top` likeliest tokens and their log-probabilities, likeliest first.
    pub top: Vec<(u32, f32)>,
}

/// `ln Σ exp(logits)`, summed in f64 from the largest logit: a token's log-probability is its
/// logit minus this.
pub fn log_normaliser(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    max + sum.ln()
}

/// `token`'s log-probability under `logits`, with the `top` likeliest alternatives.
pub fn token_logprob(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    let norm = log_normaliser(logits);
    let lp = |l: f32| (l as f64 - norm) as f32;
    TokenLogprob {
        token,
        logprob: logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| lp(l)),
        top: likeliest(logits, top).into_iter().map(|t| (t, lp(logits[t as usize]))).collect(),
    }
}

/// `token`'s log-probability from a row's summary (`ids` and `logits`: its likeliest tokens
/// in [`zinc_plugin_api::summarise_row`]'s order; `norm`: its log-normaliser), with the `top`
/// likeliest alternatives: the same figures as [`token_logprob`] on the whole row, for a token
/// among the candidates and `top` no larger than their count.
pub fn summary_logprob(ids: &[u32], logits: &[f32], norm: f32, token: u32, top: usize) -> TokenLogprob {
    let lp = |l: f32| (l as f64 - norm as f64) as f32;
    let logprob = ids.iter().position(|&t| t == token).map_or(f32::NEG_INFINITY, |i| lp(logits[i]));
    TokenLogprob { token, logprob, top: ids.iter().zip(logits).take(top).map(|(&t, &l)| (t, lp(l))).collect() }
}

/// The `n` largest logits' ids, largest first (ties: the lower id first).
fn likeliest(logits: &[f32], n: usize) -> Vec<u32> {
    let mut best: Vec<u32> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for (i, &l) in logits.iter().enumerate() {
        if best.len() == n && l <= logits[best[n - 1] as usize] {
            continue;
        }
        let at = best.partition_point(|&b| logits[b as usize] >= l);
        best.insert(at, i as u32);
        best.truncate(n);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_sum_to_one_and_the_top_is_sorted() {
        let logits = [1.0f32, 3.0, -2.0, 3.0, 0.5];
        let all: f64 = (0..5).map(|t| (token_logprob(&logits, t, 0).logprob as f64).exp()).sum();
        assert!((all - 1.0).abs() < 1e-6, "{all}");
        let t = token_logprob(&logits, 4, 3);
        assert_eq!(t.top.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3, 0]);
        assert_eq!(t.top[0].1, t.top[1].1);
        let direct = 0.5 - (logits.iter().map(|&l| (l as f64).exp()).sum::<f64>()).ln();
        assert!((t.logprob as f64 - direct).abs() < 1e-6);
    }

    #[test]
    fn a_summary_gives_the_whole_rows_log_probabilities() {
        let logits: Vec<f32> = (0..300).map(|i| ((i * 37 % 101) as f32) * 0.07 - 3.0).collect();
        let (ids, values, norm) = zinc_plugin_api::summarise_row(&logits);
        for token in [ids[0], ids[5], ids[63]] {
            let whole = token_logprob(&logits, token, 20);
            let summary = summary_logprob(&ids, &values, norm, token, 20);
            assert!((whole.logprob - summary.logprob).abs() < 1e-5, "{whole:?} {summary:?}");
            assert_eq!(
                whole.top.iter().map(|t| t.0).collect::<Vec<_>>(),
                summary.top.iter().map(|t| t.0).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let mut logits = vec![-1e4f32; 1000];
        logits[7] = 1e4;
        let t = token_logprob(&logits, 7, 2);
        assert!(t.logprob.abs() < 1e-6 && t.top[0] == (7, t.logprob));
        assert!(token_logprob(&logits, 8, 0).logprob < -1e4);
    }
}
