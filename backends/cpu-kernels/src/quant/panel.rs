//! Weight rows laid out sixteen side by side for prompt chunks.
//!
//! A prompt chunk meets every weight row with many activation rows. Row by row, each
//! super-block's bit planes and 6-bit scales are unpacked once per pass of a few activation
//! rows and every product ends in a horizontal sum; here sixteen weight rows are unpacked once
//! into a panel whose registers hold one row per lane, so one activation row meets all sixteen
//! with plain multiply-adds and the sixteen outputs come out as one register
//! (`quant/x86_panel.rs` has the layout). Only CPUs with AVX-512 VNNI have these
//! kernels; elsewhere [`WeightPanel::new`] answers `None` and the row-by-row kernels run.
//! K-quants and IQ4_XS meet 8-bit super-block activations ([`Q8KRow`]); the 32-element
//! formats meet 8-bit blocks of 32 ([`Q8Row`]).

use super::{q8::Q8Row, q8k::Q8KRow, QuantizedRow};
use std::{marker::PhantomData, ops::Range};
use zinc_formats::GgmlType;

/// Weight rows per panel.
pub const PANEL_ROWS: usize = 16;

/// An activation form that meets weight panels: each has its own panel layout and kernel.
pub trait PanelRows: QuantizedRow {
    /// Elements per panel block (a super-block of 256, or a block of 32).
    const BLOCK: usize;
    /// Whether weights of `ty` meet these rows through panels.
    fn covers(ty: GgmlType) -> bool;
    /// Bytes of one panel block (sixteen rows).
    fn panel_block_bytes() -> usize;
    /// Writes one block of the panel: `rows` holds that block of each of up to sixteen weight
    /// rows of `ty` (lane `o` is `rows[o]`, lanes past them zero), `block` the panel's bytes
    /// for it.
    ///
    /// # Safety
    /// The CPU runs the panel kernels.
    unsafe fn fill_panel_block(ty: GgmlType, rows: &[&[u8]], block: &mut [u8]);
    /// `out[r][o] +=` lane `o` of `panel` · `a[r]` over `blocks`.
    ///
    /// # Safety
    /// The CPU runs the panel kernels; `panel` and every row of `a` hold `blocks.end` blocks.
    unsafe fn dot_panel<const R: usize>(
        ty: GgmlType,
        panel: *const u8,
        blocks: Range<usize>,
        a: &[&Self; R],
        out: &mut [[f32; PANEL_ROWS]; R],
    );
    /// Blocks this row holds.
    fn blocks(&self) -> usize;
}

/// The panel kernels of this architecture; elsewhere stand-ins that are never called
/// ([`WeightPanel::new`] answers `None` where [`available`] is false).
#[cfg(target_arch = "x86_64")]
mod arch {
    pub use super::super::x86_panel::{dot_32, dot_k, fill_block_32, fill_block_k, PANEL_BLOCK_BYTES, PANEL_SB_BYTES};
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::missing_safety_doc)]
mod arch {
    use super::*;
    pub const PANEL_SB_BYTES: usize = 64;
    pub const PANEL_BLOCK_BYTES: usize = 64;
    pub unsafe fn fill_block_k(_: GgmlType, _: &[&[u8]], _: &mut [u8]) -> bool {
        unreachable!("no panel kernels on this CPU")
    }
    pub unsafe fn fill_block_32(_: GgmlType, _: &[&[u8]], _: &mut [u8]) -> bool {
        unreachable!("no panel kernels on this CPU")
    }
    pub unsafe fn dot_k<const R: usize>(
        _: GgmlType,
        _: *const u8,
        _: Range<usize>,
        _: &[&Q8KRow; R],
        _: &mut [[f32; PANEL_ROWS]; R],
    ) {
        unreachable!("no panel kernels on this CPU")
    }
    pub unsafe fn dot_32<const R: usize>(
        _: *const u8,
        _: Range<usize>,
        _: &[&Q8Row; R],
        _: &mut [[f32; PANEL_ROWS]; R],
    ) {
        unreachable!("no panel kernels on this CPU")
    }
}

impl PanelRows for Q8KRow {
    const BLOCK: usize = 256;
    fn covers(ty: GgmlType) -> bool {
        ty.is_k_quant() || ty == GgmlType::IQ4_XS
    }
    fn panel_block_bytes() -> usize {
        arch::PANEL_SB_BYTES
    }
    unsafe fn fill_panel_block(ty: GgmlType, rows: &[&[u8]], block: &mut [u8]) {
        arch::fill_block_k(ty, rows, block);
    }
    unsafe fn dot_panel<const R: usize>(
        ty: GgmlType,
        panel: *const u8,
        blocks: Range<usize>,
        a: &[&Self; R],
        out: &mut [[f32; PANEL_ROWS]; R],
    ) {
        arch::dot_k(ty, panel, blocks, a, out)
    }
    fn blocks(&self) -> usize {
        self.d.len().min(self.bsums.len() / 16).min(self.qs.len() / 256).min(self.biased.len() / 256)
    }
}

impl PanelRows for Q8Row {
    const BLOCK: usize = 32;
    fn covers(ty: GgmlType) -> bool {
        use GgmlType::*;
        matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL)
    }
    fn panel_block_bytes() -> usize {
        arch::PANEL_BLOCK_BYTES
    }
    unsafe fn fill_panel_block(ty: GgmlType, rows: &[&[u8]], block: &mut [u8]) {
        arch::fill_block_32(ty, rows, block);
    }
    unsafe fn dot_panel<const R: usize>(
        _ty: GgmlType,
        panel: *const u8,
        blocks: Range<usize>,
        a: &[&Self; R],
        out: &mut [[f32; PANEL_ROWS]; R],
    ) {
        arch::dot_32(panel, blocks, a, out)
    }
    fn blocks(&self) -> usize {
        self.d.len().min(self.s.len()).min(self.qs.len() / 32)
    }
}

/// One cache line of panel storage, so that each run of sixteen rows' weights is one aligned
/// load.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Up to sixteen weight rows of one tensor, unpacked side by side for activation rows `A`.
pub struct WeightPanel<A: PanelRows> {
    ty: GgmlType,
    /// Blocks per row.
    n_blocks: usize,
    buf: Vec<Line>,
    rows: PhantomData<A>,
}

impl<A: PanelRows> WeightPanel<A> {
    /// An empty panel for rows of `ty` that are `row_len` elements long; `None` where this CPU
    /// or this type has no panel kernels, or the rows are not whole blocks.
    pub fn new(ty: GgmlType, row_len: usize) -> Option<WeightPanel<A>> {
        if !A::covers(ty) || !row_len.is_multiple_of(A::BLOCK) || !available() {
            return None;
        }
        let n_blocks = row_len / A::BLOCK;
        let lines = n_blocks * A::panel_block_bytes() / 64;
        Some(WeightPanel { ty, n_blocks, buf: vec![Line([0; 64]); lines], rows: PhantomData })
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.n_blocks
    }

    /// Unpacks `rows` (at most sixteen, each one row of the tensor's bytes) into the panel,
    /// replacing what it held; lanes past the last row read as zero.
    pub fn fill<'a>(&mut self, rows: impl ExactSizeIterator<Item = &'a [u8]>) {
        assert!(rows.len() <= PANEL_ROWS, "{} rows for a panel of {PANEL_ROWS}", rows.len());
        let mut list: [&[u8]; PANEL_ROWS] = [&[]; PANEL_ROWS];
        let n = rows.len();
        for (o, row) in rows.enumerate() {
            assert_eq!(
                row.len(),
                self.n_blocks * self.ty.row_bytes(A::BLOCK).unwrap_or(0),
                "weight row is not {} blocks",
                self.n_blocks
            );
            list[o] = row;
        }
        // SAFETY: a byte view of the lines, which are plain bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut u8, self.buf.len() * 64) };
        let (wb, pb) = (self.ty.block_bytes(), A::panel_block_bytes());
        let mut blocks: [&[u8]; PANEL_ROWS] = [&[]; PANEL_ROWS];
        for (i, block) in bytes.chunks_exact_mut(pb).enumerate() {
            for (b, row) in blocks.iter_mut().zip(&list[..n]) {
                *b = &row[i * wb..(i + 1) * wb];
            }
            // SAFETY: `new` checked the CPU; the row lengths are checked above.
            unsafe { A::fill_panel_block(self.ty, &blocks[..n], block) };
        }
    }

    /// `out[r][o] +=` panel row `o` · `a[r]` over `blocks` (a partial sum when they are not
    /// all of them).
    pub fn dot<const R: usize>(&self, blocks: Range<usize>, a: &[&A; R], out: &mut [[f32; PANEL_ROWS]; R]) {
        assert!(blocks.end <= self.n_blocks, "blocks {blocks:?} of {}", self.n_blocks);
        assert!(a.iter().all(|row| row.blocks() >= blocks.end), "activation row shorter than the weight rows");
        // SAFETY: `new` checked the CPU; lengths checked above.
        unsafe { A::dot_panel(self.ty, self.buf.as_ptr() as *const u8, blocks, a, out) }
    }
}

/// Whether this CPU runs the panel kernels.
fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::x86::level() == Some(super::x86::Level::Avx512Vnni);
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dot, kquant};
    use zinc_formats::random::{random_blocks, Rng};
    use zinc_formats::GgmlType::*;

    fn fresh_seed() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    }

    /// A panel of three rows (the other lanes zero) of ten blocks, summed in two uneven ranges
    /// as the matrix loop's chunks do, for eight and for one activation row, against `want`.
    fn check<A: PanelRows>(ty: GgmlType, rng: &mut Rng, seed: u64, want: impl Fn(&[u8], &A) -> f32) {
        let n = 10 * A::BLOCK;
        let Some(mut panel) = WeightPanel::<A>::new(ty, n) else { return };
        let rows: Vec<Vec<u8>> = (0..3).map(|_| random_blocks(ty, n / ty.block_elements(), 1.0, rng)).collect();
        let acts: Vec<A> = (0..8)
            .map(|_| {
                let mut a = A::default();
                a.quantize_from(&(0..n).map(|_| rng.sym(2.0)).collect::<Vec<_>>());
                a
            })
            .collect();
        let a: [&A; 8] = std::array::from_fn(|i| &acts[i]);
        panel.fill(rows.iter().map(|r| r.as_slice()));
        let mut eight = [[0f32; PANEL_ROWS]; 8];
        panel.dot(0..3, &a, &mut eight);
        panel.dot(3..10, &a, &mut eight);
        let mut one = [[0f32; PANEL_ROWS]; 1];
        panel.dot(0..10, &[a[5]], &mut one);
        let close = |got: f32, want: f32| (got - want).abs() <= 1e-4 * (1.0 + want.abs());
        for (o, row) in rows.iter().enumerate() {
            for r in 0..8 {
                let (got, want) = (eight[r][o], want(row, a[r]));
                assert!(close(got, want), "{ty} row {o} act {r} seed {seed}: {got} vs {want}");
            }
            assert!(close(one[0][o], want(row, a[5])), "{ty} one row {o} seed {seed}");
        }
        for lanes in [&eight[0][3..], &one[0][3..]] {
            assert!(lanes.iter().all(|&v| v == 0.0), "{ty}: empty lanes are not zero");
        }
    }

    /// Every super-block format's panel against the plain super-block dot.
    #[test]
    fn super_block_panels_match_the_plain_dot() {
        let seed = fresh_seed();
        let mut rng = Rng::new(seed);
        for ty in [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS] {
            check::<Q8KRow>(ty, &mut rng, seed, |w, a| kquant::dot_scalar(ty, w, a));
        }
    }

    /// Every 32-element format's panel against the plain block dot.
    #[test]
    fn block_panels_match_the_plain_dot() {
        let seed = fresh_seed();
        let mut rng = Rng::new(seed);
        for ty in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL] {
            check::<Q8Row>(ty, &mut rng, seed, |w, a| dot::dot_q8_scalar(ty, w, a));
        }
    }

    #[test]
    fn formats_without_whole_blocks_have_no_panel() {
        assert!(WeightPanel::<Q8KRow>::new(Q4_0, 512).is_none());
        assert!(WeightPanel::<Q8KRow>::new(Q4_K, 576).is_none());
        assert!(WeightPanel::<Q8Row>::new(Q4_K, 512).is_none());
        assert!(WeightPanel::<Q8Row>::new(F16, 512).is_none());
    }
}
