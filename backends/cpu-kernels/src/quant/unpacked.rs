//! K-quant and IQ4_XS weight rows unpacked once per prompt tile.
//!
//! A prompt chunk meets every weight row with many activation rows. The direct kernels
//! ([`super::x86_kquant`]) unpack each super-block (nibble and bit-plane splits, 6-bit scales)
//! once per pass of a few activation rows, and at prompt sizes that unpacking costs about as
//! much as the multiply-adds. Here a tile of weight rows is unpacked once into a scratch
//! buffer that stays in the cache, and every group of activation rows reads it ready to use:
//! weights as bytes, scales and minimums as 16-bit lanes. Only CPUs with AVX-512 VNNI have
//! these kernels; elsewhere [`UnpackedTile::new`] answers `None` and the direct kernels run.
//! Activation rows go eight at a time ([`EightRows`]), their scales and minimum sums
//! prepared once for every weight row they meet.

use super::q8k::{Q8KRow, QK_K};
#[cfg(target_arch = "x86_64")]
use super::x86_kquant::zmm::EIGHT_FACTORS;
use std::ops::Range;
use zinc_formats::GgmlType;

/// One cache line of scratch, so that unpacked weights start on line boundaries.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A few weight rows of one K-quant or IQ4_XS tensor, unpacked.
pub struct UnpackedTile {
    ty: GgmlType,
    /// Super-blocks per row.
    pub n_sb: usize,
    /// Rows the tile holds now.
    rows: usize,
    buf: Vec<Line>,
}

impl UnpackedTile {
    /// An empty tile for rows of `ty` that are `row_len` elements long; `None` where this CPU
    /// or this type has no unpacked kernels, or the rows are not whole super-blocks.
    pub fn new(ty: GgmlType, row_len: usize) -> Option<UnpackedTile> {
        if !(ty.is_k_quant() || ty == GgmlType::IQ4_XS) || !row_len.is_multiple_of(QK_K) || !available() {
            return None;
        }
        Some(UnpackedTile { ty, n_sb: row_len / QK_K, rows: 0, buf: Vec::new() })
    }

    /// Unpacks `rows` (each one row of the tensor's bytes) into the tile, replacing what it held.
    pub fn fill<'a>(&mut self, rows: impl ExactSizeIterator<Item = &'a [u8]>) {
        let row_lines = self.row_lines();
        self.rows = rows.len();
        self.buf.resize(self.rows * row_lines, Line([0; 64]));
        for (j, row) in rows.enumerate() {
            assert_eq!(row.len(), self.n_sb * self.ty.block_bytes(), "weight row is not {} super-blocks", self.n_sb);
            let dst = self.buf[j * row_lines..].as_mut_ptr() as *mut u8;
            // SAFETY: `new` checked the CPU; the row's lines hold its unpacked super-blocks.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                super::x86_kquant::zmm::unpack_row(self.ty, row, dst)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = dst;
        }
    }

    /// Row `j` of the tile · R activation rows, one at a time.
    pub fn dot_rows<const R: usize>(&self, j: usize, a: &[&Q8KRow; R], out: &mut [f32; R]) {
        let u = self.checked_row(j, a);
        // SAFETY: `new` checked the CPU; `checked_row` checked the lengths.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            use super::x86_kquant::zmm::unpacked_rows;
            if self.ty == GgmlType::IQ4_XS {
                unpacked_rows::<true, R>(u, 0..self.n_sb, a, out)
            } else {
                unpacked_rows::<false, R>(u, 0..self.n_sb, a, out)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (u, out);
    }

    /// Row `j` of the tile · eight activation rows prepared once for every row of the tile,
    /// over super-blocks `sbs` only (a partial sum when they are not all of them).
    pub fn dot_eight(&self, j: usize, e: &EightRows, sbs: Range<usize>, out: &mut [f32; 8]) {
        assert!(sbs.end <= self.n_sb, "super-blocks {sbs:?} of {}", self.n_sb);
        let u = self.checked_row(j, &e.rows);
        if self.ty == GgmlType::IQ4_XS {
            // SAFETY: `new` checked the CPU; `checked_row` and the assertion the lengths.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                super::x86_kquant::zmm::unpacked_rows::<true, 8>(u, sbs, &e.rows, out)
            };
            return;
        }
        assert!(e.factors.len() >= self.n_sb * EIGHT_FACTORS, "eight rows prepared for fewer super-blocks");
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            super::x86_kquant::zmm::unpacked_eight(u, sbs, &e.rows, e.factors.as_ptr(), out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (u, out);
    }

    /// Row `j`'s unpacked bytes, after checking `j` and that every activation row is as long
    /// as the weight rows (the kernels read both without bounds checks).
    fn checked_row(&self, j: usize, a: &[&Q8KRow]) -> *const u8 {
        assert!(j < self.rows, "tile row {j} of {}", self.rows);
        for row in a {
            assert!(
                row.qs.len() >= self.n_sb * QK_K && row.bsums.len() >= self.n_sb * 16 && row.d.len() >= self.n_sb,
                "activation row shorter than the weight rows"
            );
        }
        self.buf[j * self.row_lines()..].as_ptr() as *const u8
    }

    fn row_lines(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        return self.n_sb * super::x86_kquant::zmm::UNPACKED_BYTES / 64;
        #[cfg(not(target_arch = "x86_64"))]
        return 0;
    }
}

/// Eight activation rows with the per-super-block factors the paired kernel reads beside
/// them, computed once for all the weight rows they meet.
pub struct EightRows<'a> {
    rows: [&'a Q8KRow; 8],
    factors: Vec<f32>,
}

impl<'a> EightRows<'a> {
    /// Prepares `rows` (each at least `n_sb` super-blocks long).
    pub fn new(rows: [&'a Q8KRow; 8], n_sb: usize) -> EightRows<'a> {
        let mut factors = Vec::new();
        #[cfg(target_arch = "x86_64")]
        super::x86_kquant::zmm::eight_factors(&rows, n_sb, &mut factors);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = n_sb;
        EightRows { rows, factors }
    }
}

/// Whether this CPU runs the unpacked kernels.
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

    /// Every unpacker and both kernels against the plain dot, on rows of ten super-blocks
    /// summed in two uneven ranges (as the matrix loop's chunks do), where this CPU has them.
    #[test]
    fn unpacked_tiles_match_the_plain_dot() {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let mut rng = Rng::new(seed);
        let n = 10 * QK_K;
        for ty in [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS] {
            let Some(mut tile) = UnpackedTile::new(ty, n) else { return };
            let rows: Vec<Vec<u8>> = (0..3).map(|_| random_blocks(ty, n / QK_K, 1.0, &mut rng)).collect();
            let acts: Vec<Q8KRow> =
                (0..8).map(|_| Q8KRow::new(&(0..n).map(|_| rng.sym(2.0)).collect::<Vec<_>>())).collect();
            let a: [&Q8KRow; 8] = std::array::from_fn(|i| &acts[i]);
            let eight = EightRows::new(a, n / QK_K);
            tile.fill(rows.iter().map(|r| r.as_slice()));
            for (j, row) in rows.iter().enumerate() {
                let (mut lo, mut hi, mut one) = ([0f32; 8], [0f32; 8], [0f32; 3]);
                tile.dot_eight(j, &eight, 0..3, &mut lo);
                tile.dot_eight(j, &eight, 3..10, &mut hi);
                tile.dot_rows(j, &[a[1], a[6], a[7]], &mut one);
                for r in 0..8 {
                    let want = kquant::dot_scalar(ty, row, a[r]);
                    let got = lo[r] + hi[r];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{ty} row {j} act {r} seed {seed}: {got} vs {want}"
                    );
                }
                for (i, r) in [1, 6, 7].into_iter().enumerate() {
                    let want = kquant::dot_scalar(ty, row, a[r]);
                    assert!((one[i] - want).abs() <= 1e-4 * (1.0 + want.abs()), "{ty} one row {r} seed {seed}");
                }
            }
        }
    }

    #[test]
    fn formats_without_super_blocks_have_no_tile() {
        assert!(UnpackedTile::new(Q4_0, 512).is_none());
        assert!(UnpackedTile::new(Q4_K, 576).is_none());
    }
}
