//! K-quant and IQ4_XS weight rows laid out sixteen side by side for prompt chunks.
//!
//! A prompt chunk meets every weight row with many activation rows. Row by row, each
//! super-block's bit planes and 6-bit scales are unpacked once per pass of a few activation
//! rows and every product ends in a horizontal sum; here sixteen weight rows are unpacked once
//! into a panel whose registers hold one row per lane, so one activation row meets all sixteen
//! with plain multiply-adds and the sixteen outputs come out as one register
//! ([`super::x86_kquant::panel`] has the layout). Only CPUs with AVX-512 VNNI have these
//! kernels; elsewhere [`WeightPanel::new`] answers `None` and the row-by-row kernels run.

use super::q8k::{Q8KRow, QK_K};
use std::ops::Range;
use zinc_formats::GgmlType;

/// Weight rows per panel.
pub const PANEL_ROWS: usize = 16;

/// One cache line of panel storage, so that each run of sixteen rows' weights is one aligned
/// load.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Up to sixteen weight rows of one K-quant or IQ4_XS tensor, unpacked side by side.
pub struct WeightPanel {
    ty: GgmlType,
    /// Super-blocks per row.
    n_sb: usize,
    buf: Vec<Line>,
}

impl WeightPanel {
    /// An empty panel for rows of `ty` that are `row_len` elements long; `None` where this CPU
    /// or this type has no panel kernels, or the rows are not whole super-blocks.
    pub fn new(ty: GgmlType, row_len: usize) -> Option<WeightPanel> {
        if !(ty.is_k_quant() || ty == GgmlType::IQ4_XS) || !row_len.is_multiple_of(QK_K) || !available() {
            return None;
        }
        let n_sb = row_len / QK_K;
        Some(WeightPanel { ty, n_sb, buf: vec![Line([0; 64]); n_sb * sb_bytes() / 64] })
    }

    /// Super-blocks per row.
    pub fn super_blocks(&self) -> usize {
        self.n_sb
    }

    /// Unpacks `rows` (at most sixteen, each one row of the tensor's bytes) into the panel,
    /// replacing what it held; lanes past the last row read as zero.
    pub fn fill<'a>(&mut self, rows: impl ExactSizeIterator<Item = &'a [u8]>) {
        assert!(rows.len() <= PANEL_ROWS, "{} rows for a panel of {PANEL_ROWS}", rows.len());
        if rows.len() < PANEL_ROWS {
            self.buf.fill(Line([0; 64]));
        }
        // SAFETY: a byte view of the lines, which are plain bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut u8, self.buf.len() * 64) };
        for (o, row) in rows.enumerate() {
            assert_eq!(row.len(), self.n_sb * self.ty.block_bytes(), "weight row is not {} super-blocks", self.n_sb);
            // SAFETY: `new` checked the CPU; `fill_row` checks the lengths.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                super::x86_kquant::panel::fill_row(self.ty, row, o, bytes)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (o, row, &bytes);
        }
    }

    /// `out[r][o] +=` panel row `o` · `a[r]` over super-blocks `sbs` (a partial sum when they
    /// are not all of them).
    pub fn dot<const R: usize>(&self, sbs: Range<usize>, a: &[&Q8KRow; R], out: &mut [[f32; PANEL_ROWS]; R]) {
        assert!(sbs.end <= self.n_sb, "super-blocks {sbs:?} of {}", self.n_sb);
        for row in a {
            assert!(
                row.qs.len() >= sbs.end * QK_K && row.bsums.len() >= sbs.end * 16 && row.d.len() >= sbs.end,
                "activation row shorter than the weight rows"
            );
        }
        // SAFETY: `new` checked the CPU; lengths checked above.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            use super::x86_kquant::panel::dot;
            let p = self.buf.as_ptr() as *const u8;
            match self.ty {
                GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::IQ4_XS => dot::<R, 32>(p, sbs, a, out),
                _ => dot::<R, 16>(p, sbs, a, out),
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = out;
    }
}

/// Bytes of one super-block of a panel.
fn sb_bytes() -> usize {
    #[cfg(target_arch = "x86_64")]
    return super::x86_kquant::panel::PANEL_SB_BYTES;
    #[cfg(not(target_arch = "x86_64"))]
    return 0;
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
    use crate::quant::kquant;
    use zinc_formats::random::{random_blocks, Rng};
    use zinc_formats::GgmlType::*;

    /// Every type's panel against the plain dot: a panel of three rows (the other lanes
    /// zero), rows of ten super-blocks summed in two uneven ranges as the matrix loop's chunks
    /// do, eight and one activation rows, where this CPU has the kernels.
    #[test]
    fn panels_match_the_plain_dot() {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let mut rng = Rng::new(seed);
        let n = 10 * QK_K;
        for ty in [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS] {
            let Some(mut panel) = WeightPanel::new(ty, n) else { return };
            let rows: Vec<Vec<u8>> = (0..3).map(|_| random_blocks(ty, n / QK_K, 1.0, &mut rng)).collect();
            let acts: Vec<Q8KRow> =
                (0..8).map(|_| Q8KRow::new(&(0..n).map(|_| rng.sym(2.0)).collect::<Vec<_>>())).collect();
            let a: [&Q8KRow; 8] = std::array::from_fn(|i| &acts[i]);
            panel.fill(rows.iter().map(|r| r.as_slice()));
            let mut eight = [[0f32; PANEL_ROWS]; 8];
            panel.dot(0..3, &a, &mut eight);
            panel.dot(3..10, &a, &mut eight);
            let mut one = [[0f32; PANEL_ROWS]; 1];
            panel.dot(0..10, &[a[5]], &mut one);
            for (o, row) in rows.iter().enumerate() {
                for r in 0..8 {
                    let want = kquant::dot_scalar(ty, row, a[r]);
                    let got = eight[r][o];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{ty} row {o} act {r} seed {seed}: {got} vs {want}"
                    );
                }
                let want = kquant::dot_scalar(ty, row, a[5]);
                assert!((one[0][o] - want).abs() <= 1e-4 * (1.0 + want.abs()), "{ty} one row {o} seed {seed}");
            }
            for lanes in [&eight[0][3..], &one[0][3..]] {
                assert!(lanes.iter().all(|&v| v == 0.0), "{ty}: empty lanes are not zero");
            }
        }
    }

    #[test]
    fn formats_without_super_blocks_have_no_panel() {
        assert!(WeightPanel::new(Q4_0, 512).is_none());
        assert!(WeightPanel::new(Q4_K, 576).is_none());
    }
}
