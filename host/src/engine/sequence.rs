//! One sequence on a backend: its KV pages, prefill in chunks, decode one token at a time.
//! `zinc run` and `zinc bench` use it directly; the serving scheduler batches many.

use anyhow::{bail, Result};
use zinc_plugin_api::{
    abi_stable::std_types::{RResult, RVec},
    BackendBox, KvPoolInfo, KvPoolSpec, LogitRows, SeqChunk, Step, StepOutput, WINDOW_READ_ALIGN,
};

/// Tokens per KV page.
pub const PAGE_SIZE: u32 = 16;

/// Turns a backend error into an anyhow error that keeps its kind ([`BackendError`]).
pub fn check<T>(r: RResult<T, zinc_plugin_api::PluginError>) -> Result<T> {
    match r {
        RResult::ROk(v) => Ok(v),
        RResult::RErr(e) => Err(BackendError { kind: e.kind, message: e.message.into() }.into()),
    }
}

/// A backend's error as the host carries it: what kind of failure (so that the engine can
/// tell a lost device, worth moving to another backend, from a request it built wrong) and
/// the backend's message.
#[derive(Debug)]
pub struct BackendError {
    /// The class of failure.
    pub kind: zinc_plugin_api::ErrorKind,
    /// The backend's message.
    pub message: String,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "backend: {}", self.message)
    }
}

impl std::error::Error for BackendError {}

/// How large a KV pool to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// Tokens of context per sequence.
    pub ctx: u32,
    /// Sequences of `ctx` tokens the full pages hold.
    pub seqs: u32,
    /// Sequences whose whole sliding windows the window pages hold at once (see
    /// [`window_pages_for`]); 0 keeps the sliding-window layers' keys in the full pages.
    pub window_seqs: u32,
}

impl PoolSize {
    /// A pool for `seqs` sequences of `ctx` tokens, every layer in the full pages.
    pub fn plain(ctx: u32, seqs: u32) -> PoolSize {
        PoolSize { ctx, seqs, window_seqs: 0 }
    }
}

/// Window pages for `window_seqs` sequences beside `n_pages` full pages, for windows of up to
/// `window_keys` keys: what one sequence holds while it decodes (its window, the tile of keys
/// before it that kernels may read, `WINDOW_READ_ALIGN`, and the page being filled), never
/// more than the full pages (a sequence never holds more window pages than full ones). 0
/// where the model has no sliding windows.
pub fn window_pages_for(n_pages: u32, window_keys: u32, window_seqs: u32) -> u32 {
    if window_keys == 0 {
        return 0;
    }
    let per_seq = (window_keys + WINDOW_READ_ALIGN).div_ceil(PAGE_SIZE) + 2;
    per_seq.saturating_mul(window_seqs).min(n_pages)
}

/// Allocates a KV pool of `size` for a model whose widest sliding window is `window_keys`.
pub fn create_pool(backend: &mut BackendBox, size: PoolSize, window_keys: u32) -> Result<KvPoolInfo> {
    let per_seq = size.ctx.div_ceil(PAGE_SIZE);
    let n_pages =
        per_seq.checked_mul(size.seqs).filter(|&n| n > 0).ok_or_else(|| anyhow::anyhow!("KV pool size overflows"))?;
    let window_pages = window_pages_for(n_pages, window_keys, size.window_seqs);
    check(backend.create_kv_pool(KvPoolSpec { n_pages, page_size: PAGE_SIZE, window_pages }))
}

/// A sequence that owns a fixed range of pages `[first_page, first_page + ctx / PAGE_SIZE)`.
pub struct Sequence {
    /// Host id (for step chunks).
    pub id: u64,
    /// Tokens already in the KV cache.
    pub n_past: u32,
    /// Most tokens this sequence may hold.
    pub ctx: u32,
    first_page: u32,
}

impl Sequence {
    /// A sequence over pages starting at `first_page`.
    pub fn new(id: u64, ctx: u32, first_page: u32) -> Sequence {
        Sequence { id, n_past: 0, ctx, first_page }
    }

    /// The chunk describing `tokens` appended at the current position.
    pub fn chunk(&self, first_row: u32, n: u32, logits: LogitRows) -> Result<SeqChunk> {
        let end = self.n_past + n;
        if end > self.ctx {
            bail!("the sequence would hold {end} tokens, more than its context of {}", self.ctx);
        }
        let pages: RVec<u32> = (self.first_page..self.first_page + end.div_ceil(PAGE_SIZE)).collect();
        let window_table = RVec::new();
        Ok(SeqChunk {
            seq_id: self.id,
            first_row,
            n_rows: n,
            n_past: self.n_past,
            page_table: pages,
            window_table,
            logits,
        })
    }

    /// Runs `tokens` through the backend in chunks of at most `chunk` tokens and returns the
    /// logits of the last one (or of every token with `all_logits`).
    pub fn feed(
        &mut self,
        backend: &mut BackendBox,
        tokens: &[u32],
        chunk: usize,
        all_logits: bool,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            bail!("nothing to feed");
        }
        let mut last = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(chunk.max(1)).collect();
        for (i, part) in chunks.iter().enumerate() {
            let is_last = i + 1 == chunks.len();
            let want = if all_logits {
                LogitRows::All
            } else if is_last {
                LogitRows::Last
            } else {
                LogitRows::None
            };
            let seq = self.chunk(0, part.len() as u32, want)?;
            let step = Step {
                tokens: part.iter().copied().collect(),
                positions: (self.n_past..self.n_past + part.len() as u32).collect(),
                seqs: vec![seq].into(),
            };
            let out = check(backend.execute(&step))?;
            self.n_past += part.len() as u32;
            if all_logits {
                last.extend_from_slice(&out.logits);
            } else if is_last {
                last = out.logits.into_vec();
            }
        }
        Ok(last)
    }
}

/// Runs one step over several sequences at once: each gets its `tokens` appended (a prefill
/// chunk or one decode token). Returns the step's output: logit rows and summaries in
/// sequence order, as each sequence's [`LogitRows`] asked.
pub fn step_many(backend: &mut BackendBox, work: &mut [(&mut Sequence, &[u32], LogitRows)]) -> Result<StepOutput> {
    let mut step = Step::default();
    let mut row = 0u32;
    for (seq, tokens, want) in work.iter() {
        let n = tokens.len() as u32;
        step.seqs.push(seq.chunk(row, n, *want)?);
        step.tokens.extend(tokens.iter().copied());
        step.positions.extend(seq.n_past..seq.n_past + n);
        row += n;
    }
    let out = check(backend.execute(&step))?;
    for (seq, tokens, _) in work.iter_mut() {
        seq.n_past += tokens.len() as u32;
    }
    Ok(out)
}
