//! Matrix × activation rows, split across threads by output feature.

use super::weights::Weight;
use crate::{
    pool::ThreadPool,
    quant::{
        dot,
        packed::{Packed, GROUP},
        panel::{PanelRows, WeightPanel, PANEL_ROWS},
        q8::Q8Row,
        q8k::Q8KRow,
        Activations, QuantizedRow,
    },
};
use zinc_formats::GgmlType;

/// Activation rows, in the form the weight type wants ([`Activations`]).
pub enum Rows<'a> {
    /// 8-bit rows in blocks of 32 (for 32-element weight formats).
    Q8(Vec<&'a Q8Row>),
    /// 8-bit rows in super-blocks of 256 (for K-quants).
    Q8K(Vec<&'a Q8KRow>),
    /// Float rows.
    F32(Vec<&'a [f32]>),
}

impl<'a> Rows<'a> {
    /// Number of activation rows.
    pub fn len(&self) -> usize {
        match self {
            Rows::Q8(r) => r.len(),
            Rows::Q8K(r) => r.len(),
            Rows::F32(r) => r.len(),
        }
    }

    /// The rows at `idx`, in that order.
    pub fn select(&self, idx: &[usize]) -> Rows<'a> {
        match self {
            Rows::Q8(r) => Rows::Q8(idx.iter().map(|&i| r[i]).collect()),
            Rows::Q8K(r) => Rows::Q8K(idx.iter().map(|&i| r[i]).collect()),
            Rows::F32(r) => Rows::F32(idx.iter().map(|&i| r[i]).collect()),
        }
    }
}

/// A raw output pointer shared by threads that write disjoint elements.
#[derive(Clone, Copy)]
pub struct SharedOut(pub *mut f32);
// SAFETY: every user writes a disjoint set of indices, and the pool joins before return.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

/// `out[r * n_out + o] = w.row(first_row + o) · rows[r]` for `o < n_out`.
pub fn matmul(pool: &ThreadPool, w: &Weight, first_row: usize, n_out: usize, rows: &Rows, out: &mut [f32]) {
    let n_rows = rows.len();
    assert!(out.len() >= n_rows * n_out, "matmul output too small");
    assert!(first_row + n_out <= w.rows(), "matmul reads past {}", w.name);
    // Prompt chunks meet panels of sixteen weight rows where this CPU has them; the packed
    // layout serves the smaller products.
    let min_rows = if w.packed.is_some() { PACKED_PANEL_MIN_ROWS } else { PANEL_MIN_ROWS };
    let prompt = n_rows >= min_rows && w.panels;
    let panels_32 = prompt && WeightPanel::<Q8Row>::new(w.dtype, w.row_len()).is_some();
    if let (Rows::Q8(q), Some(p), false) = (rows, &w.packed, panels_32) {
        // Whole groups, or a range that ends at the tensor's last (padded) group.
        if first_row.is_multiple_of(GROUP) && (n_out.is_multiple_of(GROUP) || first_row + n_out == w.rows()) {
            return matmul_packed(pool, p, first_row / GROUP, n_out, q, out);
        }
    }
    let dst = SharedOut(out.as_mut_ptr());
    let ty = w.dtype;
    // Ranges start on whole panels and tiles (both 16 rows).
    pool.for_claimed_ranges(n_out, PANEL_ROWS.max(TILE_ROWS), &|range| {
        let dst = dst;
        let mut scratch = vec![0f32; 2048];
        // SAFETY: (r, o) pairs are disjoint across claimed ranges; bounds asserted above.
        let put = |r: usize, o: usize, v: f32| unsafe { *dst.0.add(r * n_out + o) = v };
        match rows {
            Rows::Q8(q) => match WeightPanel::new(ty, w.row_len()).filter(|_| prompt) {
                Some(mut panel) => dot_panels::<Q8Row>(&mut panel, w, first_row, range, q, &put),
                None => dot_quantized_tiles(ty, w, first_row, range, q, &put),
            },
            Rows::Q8K(q) => match WeightPanel::new(ty, w.row_len()).filter(|_| prompt) {
                Some(mut panel) => dot_panels::<Q8KRow>(&mut panel, w, first_row, range, q, &put),
                None => dot_quantized_tiles(ty, w, first_row, range, q, &put),
            },
            Rows::F32(x) => {
                for o in range {
                    let wrow = w.row(first_row + o);
                    for r in 0..n_rows {
                        put(r, o, dot::dot_f32(ty, wrow, x[r], &mut scratch));
                    }
                }
            }
        }
    });
}

/// Activation rows from which a product goes through weight panels ([`WeightPanel`]): below,
/// the product is bound by reading the weights, which the row-by-row kernels do once.
const PANEL_MIN_ROWS: usize = 16;
/// The same for weights in the packed four-row layout (Q4_0, Q4_1, Q8_0; Q5_0, Q5_1 on
/// x86-64), whose kernels meet eight activation rows per pass with each group's scales handled
/// once: at 16 rows they beat filling a panel for so few (docs/measurements/cpu-decode-2026-12-07/).
const PACKED_PANEL_MIN_ROWS: usize = 32;

/// Weight rows per tile of a prompt-sized product: each group of activation rows meets every
/// row of a tile while both are in L1, so the activations stream from L2 once per tile instead
/// of once per weight row (docs/cpu-tier.md).
const TILE_ROWS: usize = 16;

/// Weight rows `range` (offset by `first_row`) · every quantized activation row, tile by tile,
/// `put(row, output, value)` for each.
fn dot_quantized_tiles<A: QuantizedRow>(
    ty: GgmlType,
    w: &Weight,
    first_row: usize,
    range: std::ops::Range<usize>,
    q: &[&A],
    put: &impl Fn(usize, usize, f32),
) {
    let n_rows = q.len();
    // Small batches are bound by reading the weights: one pass per weight row, eight rows
    // at a time (see `dot_quantized`).
    if n_rows < 16 {
        for o in range {
            dot_quantized(ty, w.row(first_row + o), q, &mut |r, v| put(r, o, v));
        }
        return;
    }
    // Four activation rows per pass: prompt chunks are compute-bound and measured faster with
    // four than eight (register pressure).
    let mut start = range.start;
    while start < range.end {
        let tile = start..(start + TILE_ROWS).min(range.end);
        let mut r = 0;
        while r + 4 <= n_rows {
            let a = [q[r], q[r + 1], q[r + 2], q[r + 3]];
            for o in tile.clone() {
                let mut out = [0f32; 4];
                if A::dot_rows(ty, w.row(first_row + o), &a, &mut out) {
                    out.iter().enumerate().for_each(|(i, v)| put(r + i, o, *v));
                } else {
                    (0..4).for_each(|i| put(r + i, o, A::dot(ty, w.row(first_row + o), q[r + i])));
                }
            }
            r += 4;
        }
        for r in r..n_rows {
            for o in tile.clone() {
                put(r, o, A::dot(ty, w.row(first_row + o), q[r]));
            }
        }
        start = tile.end;
    }
}

/// Elements of the rows that the activation rows walk through a panel before the next ones:
/// the panel's part (45 KiB for K-quants, 40 KiB for 32-element formats) stays in L1 while
/// every activation row meets it, where whole rows (up to 240 KiB of panel for an FFN's down
/// projection) would not fit; half as many elements measured no better.
const CHUNK_ELEMENTS: usize = 2048;

/// [`dot_quantized_tiles`] for prompt-sized products on CPUs with panel kernels: each sixteen
/// weight rows are unpacked once into a panel ([`WeightPanel`]) that every activation row
/// meets, eight at a time, over chunks of the rows' length.
fn dot_panels<A: PanelRows>(
    panel: &mut WeightPanel<A>,
    w: &Weight,
    first_row: usize,
    range: std::ops::Range<usize>,
    q: &[&A],
    put: &impl Fn(usize, usize, f32),
) {
    let n_rows = q.len();
    let n_blocks = panel.blocks();
    let per_chunk = CHUNK_ELEMENTS / A::BLOCK;
    let mut sums = vec![[0f32; PANEL_ROWS]; n_rows];
    let mut start = range.start;
    while start < range.end {
        let rows = start..(start + PANEL_ROWS).min(range.end);
        panel.fill(rows.clone().map(|o| w.row(first_row + o)));
        sums.fill([0.0; PANEL_ROWS]);
        for chunk in (0..n_blocks).step_by(per_chunk) {
            let blocks = chunk..(chunk + per_chunk).min(n_blocks);
            let mut eights = sums.chunks_exact_mut(8);
            for (e, out) in (&mut eights).enumerate() {
                let a: [&A; 8] = std::array::from_fn(|i| q[8 * e + i]);
                panel.dot(blocks.clone(), &a, out.try_into().expect("eight rows"));
            }
            let done = n_rows - eights.into_remainder().len();
            for r in done..n_rows {
                panel.dot(blocks.clone(), &[q[r]], (&mut sums[r..r + 1]).try_into().expect("one row"));
            }
        }
        for (r, s) in sums.iter().enumerate() {
            rows.clone().enumerate().for_each(|(j, o)| put(r, o, s[j]));
        }
        start = rows.end;
    }
}

/// One weight row · every quantized activation row, `put(row, value)` for each.
fn dot_quantized<A: QuantizedRow>(ty: GgmlType, wrow: &[u8], q: &[&A], put: &mut impl FnMut(usize, f32)) {
    let n_rows = q.len();
    let mut r = 0;
    // Several activation rows per pass over the weight row where a kernel exists (the weight
    // block is loaded and unpacked once per pass). Small batches (batched decode, 8 to 15
    // rows; larger ones take `dot_quantized_tiles`) take eight per pass: they are bound by
    // reading weights, and one pass fewer pays.
    while r + 8 <= n_rows {
        let mut out = [0f32; 8];
        if !A::dot_rows(ty, wrow, &std::array::from_fn(|i| q[r + i]), &mut out) {
            break;
        }
        out.iter().enumerate().for_each(|(i, v)| put(r + i, *v));
        r += 8;
    }
    while r + 4 <= n_rows {
        let mut out = [0f32; 4];
        if !A::dot_rows(ty, wrow, &[q[r], q[r + 1], q[r + 2], q[r + 3]], &mut out) {
            break;
        }
        out.iter().enumerate().for_each(|(i, v)| put(r + i, *v));
        r += 4;
    }
    for r in r..n_rows {
        put(r, A::dot(ty, wrow, q[r]));
    }
}

/// [`matmul`] over repacked rows: groups of four outputs split across threads; each group's
/// blocks (a few KiB, in L1) are read once per eight, four or one activation rows.
fn matmul_packed(pool: &ThreadPool, p: &Packed, first_group: usize, n_out: usize, q: &[&Q8Row], out: &mut [f32]) {
    let n_rows = q.len();
    let dst = SharedOut(out.as_mut_ptr());
    pool.for_claimed_ranges(n_out.div_ceil(GROUP), 1, &|range| {
        let dst = dst;
        // SAFETY: (r, o) pairs are disjoint across claimed ranges (each owns its groups' outputs);
        // `o < n_out` and `r < n_rows` keep writes inside `out`, asserted by the caller.
        let put = |r: usize, g: usize, v: &[f32; GROUP]| {
            for (j, &x) in v.iter().enumerate() {
                let o = g * GROUP + j;
                if o < n_out {
                    unsafe { *dst.0.add(r * n_out + o) = x };
                }
            }
        };
        for g in range {
            let mut r = 0;
            while r + 8 <= n_rows {
                let mut o = [[0f32; GROUP]; 8];
                p.dot_group(first_group + g, &std::array::from_fn(|i| q[r + i]), &mut o);
                o.iter().enumerate().for_each(|(i, v)| put(r + i, g, v));
                r += 8;
            }
            while r + 4 <= n_rows {
                let mut o = [[0f32; GROUP]; 4];
                p.dot_group(first_group + g, &std::array::from_fn(|i| q[r + i]), &mut o);
                o.iter().enumerate().for_each(|(i, v)| put(r + i, g, v));
                r += 4;
            }
            for r in r..n_rows {
                let mut o = [[0f32; GROUP]; 1];
                p.dot_group(first_group + g, &[q[r]], &mut o);
                put(r, g, &o[0]);
            }
        }
    });
}

/// An activation's quantized copies, each made on first use by a matrix product that wants
/// it; the owner drops them when the activation is rewritten.
#[derive(Default)]
pub struct QuantizedCopies {
    blocks: Option<Vec<Q8Row>>,
    super_blocks: Option<Vec<Q8KRow>>,
}

impl QuantizedCopies {
    /// The `n` rows of `x` (each `width` long) in the form `kind`, quantized on first use.
    pub fn rows<'a>(
        &'a mut self,
        pool: &ThreadPool,
        x: &'a [f32],
        width: usize,
        n: usize,
        kind: Activations,
    ) -> Rows<'a> {
        match kind {
            Activations::F32 => Rows::F32(x.chunks_exact(width).take(n).collect()),
            Activations::Q8Blocks => {
                Rows::Q8(self.blocks.get_or_insert_with(|| quantize_rows(pool, x, width, n)).iter().collect())
            }
            Activations::Q8SuperBlocks => {
                Rows::Q8K(self.super_blocks.get_or_insert_with(|| quantize_rows(pool, x, width, n)).iter().collect())
            }
        }
    }
}

/// The activation form `w` is dotted against.
pub fn wants(w: &Weight) -> Activations {
    w.acts
}

/// Quantizes `n` rows of width `width` from `x`, in parallel.
fn quantize_rows<A: QuantizedRow>(pool: &ThreadPool, x: &[f32], width: usize, n: usize) -> Vec<A> {
    let mut rows: Vec<A> = (0..n).map(|_| A::default()).collect();
    let ptr = SharedRows(rows.as_mut_ptr());
    pool.for_claimed_ranges(n, 1, &|range| {
        let ptr = ptr;
        for r in range {
            // SAFETY: each row index is handled by exactly one thread.
            unsafe { (*ptr.0.add(r)).quantize_from(&x[r * width..(r + 1) * width]) };
        }
    });
    rows
}

struct SharedRows<A>(*mut A);
// SAFETY: disjoint rows per thread; joined before return.
unsafe impl<A> Send for SharedRows<A> {}
unsafe impl<A> Sync for SharedRows<A> {}
impl<A> Clone for SharedRows<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for SharedRows<A> {}

#[cfg(test)]
mod tests {
    use super::*;
    use zinc_formats::random::{random_blocks, Rng};
    use zinc_formats::GgmlType::*;
    use zinc_plugin_api::{abi_stable::std_types::RString, DType, TensorDesc};

    /// Products of every size (row by row, packed groups, weight panels where this CPU has
    /// them, tiles of weight rows otherwise, and the rows left over) give every output the
    /// single-row dot product gives it, for a range of outputs that starts inside the tensor
    /// and ends inside a panel, and for the whole tensor (the packed formats' groups); with
    /// panels off, exactly (batch invariance). Two threads claim the ranges.
    #[test]
    fn tiled_products_match_row_by_row_dots() {
        let mut rng = Rng::new(7);
        let pool = ThreadPool::new(2);
        let (k, n_weights) = (512usize, 45usize);
        for ty in [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL] {
            let bytes = random_blocks(ty, k / ty.block_elements() * n_weights, 1.0, &mut rng);
            let desc = TensorDesc {
                name: RString::from("w"),
                dtype: DType(ty.id()),
                dims: vec![k as u64, n_weights as u64].into(),
                data: bytes.as_ptr(),
                len: bytes.len(),
            };
            let mut w = Weight::adopt(&desc, Default::default()).unwrap();
            w.pack();
            for (n_rows, panels) in [(1, true), (9, true), (16, true), (37, true), (16, false), (37, false)] {
                w.panels = panels;
                let x: Vec<Vec<f32>> = (0..n_rows).map(|_| (0..k).map(|_| rng.sym(1.0)).collect()).collect();
                for (first, n_out) in [(3, 39), (0, n_weights)] {
                    // The product of `rows` through `matmul`, and what the plain dot gives.
                    let run = |rows: &[Vec<f32>]| -> (Vec<f32>, Vec<f32>) {
                        let mut out = vec![0f32; rows.len() * n_out];
                        let want = match w.acts {
                            Activations::Q8SuperBlocks => {
                                let q: Vec<Q8KRow> = rows.iter().map(|r| Q8KRow::new(r)).collect();
                                matmul(&pool, &w, first, n_out, &Rows::Q8K(q.iter().collect()), &mut out);
                                expected(&q, n_out, |r, o| dot::dot_q8k(ty, w.row(first + o), r))
                            }
                            Activations::Q8Blocks => {
                                let q: Vec<Q8Row> = rows.iter().map(|r| Q8Row::new(r)).collect();
                                matmul(&pool, &w, first, n_out, &Rows::Q8(q.iter().collect()), &mut out);
                                expected(&q, n_out, |r, o| dot::dot_q8(ty, w.row(first + o), r))
                            }
                            Activations::F32 => unreachable!("{ty} takes quantized activations"),
                        };
                        (out, want)
                    };
                    let (out, want) = run(&x);
                    let alone: Vec<f32> = x.iter().flat_map(|r| run(std::slice::from_ref(r)).0).collect();
                    for (i, ((g, e), a)) in out.iter().zip(&want).zip(&alone).enumerate() {
                        assert!(
                            (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                            "{ty}, {n_rows} rows, outputs {first}.., element {i}: {g} vs {e}"
                        );
                        // Off the panels a row is computed as it is alone, to the last bit.
                        assert!(
                            panels || g == a,
                            "{ty}, {n_rows} rows without panels, outputs {first}.., element {i}: {g} vs {a} alone"
                        );
                    }
                }
            }
        }
    }

    fn expected<A>(q: &[A], n_out: usize, dot: impl Fn(&A, usize) -> f32) -> Vec<f32> {
        q.iter().flat_map(|r| (0..n_out).map(|o| dot(r, o)).collect::<Vec<_>>()).collect()
    }
}
