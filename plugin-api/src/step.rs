//! One continuous-batching step: the single call per step that crosses the plugin boundary.

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
                LogitRows::None => 0,
                LogitRows::Last => 1,
                LogitRows::All => s.n_rows as usize,
            })
            .sum()
    }

    /// Checks the step's internal consistency, so a backend never indexes out of bounds.
    pub fn validate(&self, page_size: u32, n_pages: u32) -> Result<(), String> {
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

/// What a step returns.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Default)]
pub struct StepOutput {
    /// Logit rows back to back (`rows × n_vocab`), in chunk order.
    pub logits: RVec<f32>,
    /// Rows in `logits`.
    pub rows: u32,
    /// Time the device spent on the step, in nanoseconds, as the backend measured it.
    pub device_time_ns: u64,
}
