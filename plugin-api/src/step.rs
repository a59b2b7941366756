//! One continuous-batching step: the single call per step that crosses the plugin boundary.

use crate::{backend::KvPoolInfo, kv::first_window_page};
use abi_stable::{std_types::RVec, StableAbi};

/// Which rows of a sequence's chunk need logits.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// None (a prefill chunk that is not the last one).
    None,
    /// Only the chunk's last row (the usual case: sample the next token).
    Last,
    /// Every row (scoring a prompt, speculative checks, tests).
    All,
    /// Only the chunk's last row, summarised: its [`TOP_CANDIDATES`] likeliest tokens and the
    /// row's log-normaliser instead of its whole row ([`StepOutput::top_ids`]). What a sampler
    /// with a small top-k, greedy decoding and the API's log-probabilities need, without a
    /// whole vocabulary per row crossing to the host.
    LastTop,
}

/// Candidates per [`LogitRows::LastTop`] row (fewer where the vocabulary is smaller): the
/// largest top-k a request may sample from the summary instead of the whole row.
pub const TOP_CANDIDATES: u32 = 64;

/// Candidates a summary of a row of `n_vocab` logits holds.
pub fn top_count(n_vocab: u32) -> u32 {
    TOP_CANDIDATES.min(n_vocab)
}

/// The summary [`LogitRows::LastTop`] asks for, computed from a whole row: its
/// [`top_count`] largest logits' ids and values, largest first and the lower id first among
/// equal values (the order `f32::total_cmp` gives), and `ln Σ exp(row)` summed in f64 from
/// the largest logit. Every backend's summary must equal this one computed from its own
/// logits (the normaliser to rounding).
pub fn summarise_row(row: &[f32]) -> (Vec<u32>, Vec<f32>, f32) {
    let k = top_count(row.len() as u32) as usize;
    let mut ids: Vec<u32> = (0..row.len() as u32).collect();
    let order = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    if k > 0 && k < ids.len() {
        ids.select_nth_unstable_by(k - 1, order);
        ids.truncate(k);
    }
    ids.sort_unstable_by(order);
    let values: Vec<f32> = ids.iter().map(|&i| row[i as usize]).collect();
    let max = values.first().copied().unwrap_or(f32::NEG_INFINITY) as f64;
    let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
    (ids, values, (max + sum.ln()) as f32)
}

/// The part of one sequence that this step processes: a prefill chunk or one decode token.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct SeqChunk {
    /// The host's id for the sequence (stable across steps; for counters and errors).
    pub seq_id: u64,
    /// Index of this chunk's first row in [`Step::tokens`].
    pub first_row: u32,
    /// Rows (tokens) in this chunk.
    pub n_rows: u32,
    /// Tokens of this sequence already in the KV cache before this chunk.
    pub n_past: u32,
    /// KV page ids covering positions `0 .. n_past + n_rows`, page `i` holding positions
    /// `i * page_size ..`.
    pub page_table: RVec<u32>,
    /// With window pages in the pool ([`crate::kv`]): the sliding-window layers' page ids
    /// for the same positions, entries before [`crate::first_window_page`] of `n_past` may be
    /// [`crate::NO_PAGE`]. Empty without window pages.
    pub window_table: RVec<u32>,
    /// Which rows need logits.
    pub logits: LogitRows,
}

/// A whole engine step: many sequences, a mix of prefill chunks and single decode tokens.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Default)]
pub struct Step {
    /// Token ids, all chunks back to back.
    pub tokens: RVec<u32>,
    /// Position of each token within its sequence.
    pub positions: RVec<u32>,
    /// The chunks, in row order.
    pub seqs: RVec<SeqChunk>,
}

impl Step {
    /// Number of logit rows this step produces, in output order.
    pub fn logit_row_count(&self) -> usize {
        self.seqs
            .iter()
            .map(|s| match s.logits {
                LogitRows::None | LogitRows::LastTop => 0,
                LogitRows::Last => 1,
                LogitRows::All => s.n_rows as usize,
            })
            .sum()
    }

    /// Number of summarised rows ([`LogitRows::LastTop`]) this step produces.
    pub fn top_row_count(&self) -> usize {
        self.seqs.iter().filter(|s| s.logits == LogitRows::LastTop).count()
    }

    /// Checks the step's internal consistency against the pool (`window_keys`: the model's
    /// widest sliding window), so a backend never indexes out of bounds.
    pub fn validate(&self, pool: &KvPoolInfo, window_keys: u32) -> Result<(), String> {
        let (page_size, n_pages) = (pool.page_size, pool.n_pages);
        if self.tokens.len() != self.positions.len() {
            return Err(format!("step has {} tokens but {} positions", self.tokens.len(), self.positions.len()));
        }
        let mut next_row = 0u64;
        for s in self.seqs.iter() {
            if s.first_row as u64 != next_row || s.n_rows == 0 {
                return Err(format!("sequence {} has rows out of order or empty", s.seq_id));
            }
            next_row += s.n_rows as u64;
            let ctx = s.n_past as u64 + s.n_rows as u64;
            let pages_needed = ctx.div_ceil(page_size as u64);
            if (s.page_table.len() as u64) < pages_needed {
                return Err(format!(
                    "sequence {} needs {pages_needed} KV pages for {ctx} tokens, got {}",
                    s.seq_id,
                    s.page_table.len()
                ));
            }
            if let Some(bad) = s.page_table.iter().find(|&&p| p >= n_pages) {
                return Err(format!("sequence {} names KV page {bad}, pool has {n_pages}", s.seq_id));
            }
            check_window_table(s, pool, window_keys, pages_needed as usize)?;
            for r in 0..s.n_rows {
                let row = (s.first_row + r) as usize;
                if row >= self.positions.len() || self.positions[row] != s.n_past + r {
                    return Err(format!("sequence {} has a wrong position at row {row}", s.seq_id));
                }
            }
        }
        if next_row != self.tokens.len() as u64 {
            return Err(format!("chunks cover {next_row} rows but the step has {} tokens", self.tokens.len()));
        }
        Ok(())
    }
}

/// A chunk's window table: empty without window pages; with them, long enough for its
/// context and naming window pages from the first one its step may read.
fn check_window_table(s: &SeqChunk, pool: &KvPoolInfo, window_keys: u32, pages_needed: usize) -> Result<(), String> {
    if pool.window_pages == 0 {
        return match s.window_table.is_empty() {
            true => Ok(()),
            false => Err(format!("sequence {} has a window table but the pool has no window pages", s.seq_id)),
        };
    }
    if s.window_table.len() < pages_needed {
        return Err(format!(
            "sequence {} needs {pages_needed} window pages for its context, got {}",
            s.seq_id,
            s.window_table.len()
        ));
    }
    let first = (first_window_page(window_keys, s.n_past, pool.page_size) as usize).min(pages_needed);
    let window = pool.n_pages..pool.n_pages.saturating_add(pool.window_pages);
    match s.window_table[first..pages_needed].iter().find(|p| !window.contains(p)) {
        Some(bad) => Err(format!(
            "sequence {} names window page {bad} where it reads keys; window pages are {}..{}",
            s.seq_id, window.start, window.end
        )),
        None => Ok(()),
    }
}

/// What a step returns.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Default)]
pub struct StepOutput {
    /// Logit rows back to back (`rows × n_vocab`), in chunk order.
    pub logits: RVec<f32>,
    /// Rows in `logits`.
    pub rows: u32,
    /// The summaries of the [`LogitRows::LastTop`] chunks' rows, in chunk order: each row's
    /// [`top_count`] likeliest token ids, as [`summarise_row`] orders them.
    pub top_ids: RVec<u32>,
    /// Their logits, in the same order.
    pub top_logits: RVec<f32>,
    /// Each summarised row's `ln Σ exp(logits)` over the whole vocabulary: a token's
    /// log-probability is its logit minus this.
    pub top_norms: RVec<f32>,
    /// Time the device spent on the step, in nanoseconds, as the backend measured it.
    pub device_time_ns: u64,
}

impl StepOutput {
    /// Checks that the output holds what `step` asked for, for a vocabulary of `n_vocab`: as
    /// many whole rows and summaries, and candidate ids inside the vocabulary. A host checks a
    /// plugin's output before reading it, so that a faulty plugin is an error, never an index
    /// past the end or a token that does not exist.
    pub fn check_shape(&self, step: &Step, n_vocab: usize) -> Result<(), String> {
        let (rows, tops, k) = (step.logit_row_count(), step.top_row_count(), top_count(n_vocab as u32) as usize);
        if self.rows as usize != rows || self.logits.len() != rows * n_vocab {
            return Err(format!(
                "the step asked for {rows} logit rows of {n_vocab}; the backend returned {} values as {} rows",
                self.logits.len(),
                self.rows
            ));
        }
        if self.top_ids.len() != tops * k || self.top_logits.len() != tops * k || self.top_norms.len() != tops {
            return Err(format!(
                "the step asked for {tops} summaries of {k} candidates; the backend returned {} ids, {} logits and {} normalisers",
                self.top_ids.len(),
                self.top_logits.len(),
                self.top_norms.len()
            ));
        }
        if let Some(bad) = self.top_ids.iter().find(|&&id| id as usize >= n_vocab) {
            return Err(format!("the backend's summary names token {bad}, outside the {n_vocab}-token vocabulary"));
        }
        Ok(())
    }

    /// The output of a step whose picked rows' logits (every row that [`LogitRows::Last`],
    /// [`LogitRows::All`] and [`LogitRows::LastTop`] name, in chunk order, `n_vocab` each)
    /// were computed on the host side: the summarised rows are summarised, the rest kept.
    pub fn from_picked_rows(step: &Step, picked: &[f32], n_vocab: usize, device_time_ns: u64) -> StepOutput {
        let mut out = StepOutput { device_time_ns, ..Default::default() };
        let mut logits = Vec::with_capacity(step.logit_row_count() * n_vocab);
        let mut row = 0;
        for s in step.seqs.iter() {
            let n = match s.logits {
                LogitRows::None => 0,
                LogitRows::Last | LogitRows::LastTop => 1,
                LogitRows::All => s.n_rows as usize,
            };
            let rows = &picked[row * n_vocab..(row + n) * n_vocab];
            row += n;
            if s.logits == LogitRows::LastTop {
                let (ids, values, norm) = summarise_row(rows);
                out.top_ids.extend(ids);
                out.top_logits.extend(values);
                out.top_norms.push(norm);
            } else {
                logits.extend_from_slice(rows);
            }
        }
        out.rows = (logits.len() / n_vocab.max(1)) as u32;
        out.logits = logits.into();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_orders_by_value_then_id_and_keeps_the_normaliser() {
        let mut row = vec![0.0f32; 100];
        row[7] = 3.0;
        row[3] = 3.0;
        row[50] = 5.0;
        row[99] = -1.0;
        let (ids, values, norm) = summarise_row(&row);
        assert_eq!(ids.len(), TOP_CANDIDATES as usize);
        assert_eq!(&ids[..4], &[50, 3, 7, 0]);
        assert_eq!(&values[..4], &[5.0, 3.0, 3.0, 0.0]);
        // Ties at zero: the lowest ids, in order, and never the row's smallest value.
        assert_eq!(
            ids[3..].to_vec(),
            (0..100).filter(|&i| ![3, 7, 50, 99].contains(&i)).take(61).collect::<Vec<u32>>()
        );
        let want = row.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
        assert!((norm as f64 - want).abs() < 1e-5, "{norm} against {want}");
    }

    #[test]
    fn picked_rows_split_into_whole_rows_and_summaries() {
        let chunk = |seq_id, first_row, n_rows, logits| SeqChunk {
            seq_id,
            first_row,
            n_rows,
            n_past: 0,
            page_table: vec![0].into(),
            window_table: RVec::new(),
            logits,
        };
        let step = Step {
            tokens: vec![1, 2, 3, 4].into(),
            positions: vec![0, 1, 0, 0].into(),
            seqs: vec![
                chunk(0, 0, 2, LogitRows::All),
                chunk(1, 2, 1, LogitRows::LastTop),
                chunk(2, 3, 1, LogitRows::Last),
            ]
            .into(),
        };
        let n_vocab = 3;
        let picked: Vec<f32> = (0..4 * n_vocab).map(|v| v as f32).collect();
        let out = StepOutput::from_picked_rows(&step, &picked, n_vocab, 9);
        assert_eq!(out.rows, 3);
        assert_eq!(out.logits.to_vec(), [0., 1., 2., 3., 4., 5., 9., 10., 11.]);
        assert_eq!(out.top_ids.to_vec(), [2, 1, 0]);
        assert_eq!(out.top_logits.to_vec(), [8., 7., 6.]);
        assert_eq!(out.top_norms.len(), 1);
        assert_eq!(out.device_time_ns, 9);
        assert_eq!(out.check_shape(&step, n_vocab), Ok(()));
        let mut short = out.clone();
        short.top_norms.pop();
        assert!(short.check_shape(&step, n_vocab).unwrap_err().contains("1 summaries of 3"));
        let mut foreign = out.clone();
        foreign.top_ids[0] = 3;
        assert!(foreign.check_shape(&step, n_vocab).unwrap_err().contains("token 3"));
        let mut fewer = out;
        fewer.logits.truncate(8);
        assert!(fewer.check_shape(&step, n_vocab).unwrap_err().contains("3 logit rows"));
    }

    #[test]
    fn window_tables_name_window_pages_wherever_keys_are_read() {
        let pool =
            KvPoolInfo { n_pages: 40, page_size: 16, bytes_per_page: 8, window_pages: 10, bytes_per_window_page: 4 };
        // One decode row at position 600 with a 512-key window: pages 4..=37 may be read.
        let step = |window_table: Vec<u32>| Step {
            tokens: vec![1].into(),
            positions: vec![600].into(),
            seqs: vec![SeqChunk {
                seq_id: 5,
                first_row: 0,
                n_rows: 1,
                n_past: 600,
                page_table: (0..38).collect(),
                window_table: window_table.into(),
                logits: LogitRows::Last,
            }]
            .into(),
        };
        let freed_then_held =
            |held: u32| -> Vec<u32> { (0..38).map(|p| if p < held { crate::NO_PAGE } else { 40 + p % 10 }).collect() };
        assert_eq!(step(freed_then_held(4)).validate(&pool, 512), Ok(()));
        let early = step(freed_then_held(5)).validate(&pool, 512).unwrap_err();
        assert!(early.contains("names window page 4294967295"), "{early}");
        let mut full_id = freed_then_held(0);
        full_id[30] = 3;
        assert!(step(full_id).validate(&pool, 512).unwrap_err().contains("window pages are 40..50"));
        assert!(step(freed_then_held(0)[..37].to_vec())
            .validate(&pool, 512)
            .unwrap_err()
            .contains("needs 38 window pages"));
        let no_window = KvPoolInfo { window_pages: 0, ..pool };
        assert!(step(freed_then_held(0)).validate(&no_window, 512).unwrap_err().contains("no window pages"));
        assert_eq!(step(Vec::new()).validate(&no_window, 512), Ok(()));
    }
}
