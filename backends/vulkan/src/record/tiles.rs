//! Which matrix-unit tile a plain product takes (shaders/matmul/matmul_coopmat.comp), how many
//! slices of its k loop the short tile splits into where its grid alone would leave the device
//! idle, and the dispatch that adds those slices into the products' outputs.

use super::{
    recorder::Recorder, COOPMAT_FEATURES, COOPMAT_ROWS, COOPMAT_SHORT_ROWS, COOPMAT_WIDE_FEATURES,
    COOPMAT_WIDE_MIN_GROUPS, SPLIT_K_GROUPS, SPLIT_K_MAX, SPLIT_K_MIN_STEPS,
};
use crate::{catalogue::CoopmatTile, catalogue::KernelId, kernels::Push};
use zinc_plugin_api::PluginResult;

/// The tile of a plain matrix-unit product of `n_out` features over `rows` rows of `k`: the
/// short one for chunks that fit its rows (the others would pad them to 128), split over k
/// where its grid alone would be small and the caller has the scratch (`split`), else the wide
/// one where it would have at least COOPMAT_WIDE_MIN_GROUPS workgroups.
pub(super) fn coopmat_tile(n_out: u32, rows: u32, k: u32, split: bool) -> CoopmatTile {
    if rows <= COOPMAT_SHORT_ROWS && split && split_k(n_out, k) > 1 {
        CoopmatTile::ShortSplit
    } else if rows <= COOPMAT_SHORT_ROWS {
        CoopmatTile::Short
    } else if n_out.div_ceil(COOPMAT_WIDE_FEATURES) * rows.div_ceil(COOPMAT_ROWS) >= COOPMAT_WIDE_MIN_GROUPS {
        CoopmatTile::Wide
    } else {
        CoopmatTile::Plain
    }
}

/// Output features and rows per workgroup of a matrix-unit tile.
pub(super) fn coopmat_dims(tile: CoopmatTile) -> (u32, u32) {
    match tile {
        CoopmatTile::Plain => (COOPMAT_FEATURES, COOPMAT_ROWS),
        CoopmatTile::Wide => (COOPMAT_WIDE_FEATURES, COOPMAT_ROWS),
        CoopmatTile::Short | CoopmatTile::ShortSplit | CoopmatTile::Grouped => (COOPMAT_FEATURES, COOPMAT_SHORT_ROWS),
    }
}

/// Slices of the k loop of a short-tile product of `n_out` features over rows of `k`: enough
/// for about SPLIT_K_GROUPS workgroups, at most SPLIT_K_MAX, each slice at least
/// SPLIT_K_MIN_STEPS steps of two blocks; no slice left empty. 1: not split.
pub(super) fn split_k(n_out: u32, k: u32) -> u32 {
    let tiles = n_out.div_ceil(COOPMAT_FEATURES).max(1);
    let steps = (k / 32).div_ceil(2).max(1);
    let want = (SPLIT_K_GROUPS / tiles).min(SPLIT_K_MAX).min(steps / SPLIT_K_MIN_STEPS).max(1);
    steps.div_ceil(steps.div_ceil(want))
}

/// Whether plain matrix-unit products of one input with these output widths (two or three)
/// can be one dispatch side by side: every boundary between them on a tile edge of the kernel
/// their sum takes. A layer's Q, K and V products then share the wide tiles (the K and V
/// products alone fill a few dozen workgroups).
pub(super) fn side_by_side(n_outs: &[u32], rows: u32) -> bool {
    // Every tile of a kind has the same features, split over k or not.
    let (tile, _) = coopmat_dims(coopmat_tile(n_outs.iter().sum(), rows, 0, false));
    (2..=3).contains(&n_outs.len())
        && n_outs[..n_outs.len() - 1]
            .iter()
            .scan(0, |at, n| {
                *at += n;
                Some(*at)
            })
            .all(|edge| edge % tile == 0)
}

/// Where the slices of a product split over k go: how many there are, the outputs of the
/// products side by side, and the features from which the second and third take over.
pub(super) struct SplitOutputs {
    pub(super) splits: u32,
    pub(super) outs: [u64; 3],
    pub(super) at: [u32; 2],
}

/// Adds the slices of partial sums at `partial` (n_out features × rows each) into the
/// products' outputs (shaders/matmul/split_sum.comp).
pub(super) fn split_sum(rec: &mut Recorder, partial: u64, s: &SplitOutputs, n_out: u32, rows: u32) -> PluginResult<()> {
    let [out, out2, out3] = s.outs;
    let push = Push::default()
        .addr(partial)
        .addr(out)
        .addr(out2)
        .addr(out3)
        .u32(n_out)
        .u32(rows)
        .u32(s.splits)
        .u32(s.at[0])
        .u32(s.at[1]);
    let writes: Vec<u64> = s.outs.into_iter().filter(|&o| o != 0).collect();
    rec.dispatch(KernelId::SplitSum, push, Recorder::folded((n_out * rows).div_ceil(256)), &[partial], &writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_products_fill_the_device_within_the_scratch_and_leave_no_slice_empty() {
        let scratch = crate::record::SPLIT_K_SCRATCH_FLOATS;
        for n_out in (64..=40_000).step_by(97).chain([64, 576, 1024, 4096, 12288, 22016, 32000]) {
            for k in (64..=20_000).step_by(32 * 7).chain([576, 1536, 4096, 11008, 14336]) {
                let splits = split_k(n_out, k);
                assert!((1..=SPLIT_K_MAX).contains(&splits), "{n_out} × {k}: {splits} slices");
                // The scratch holds every slice of up to 64 rows of the features' tiles.
                let floats = (splits * n_out.div_ceil(COOPMAT_FEATURES) * COOPMAT_FEATURES * COOPMAT_SHORT_ROWS) as u64;
                assert!(splits == 1 || floats <= scratch, "{n_out} × {k}: {splits} slices need {floats} floats");
                // The shader's share per slice (steps of two blocks) leaves none empty.
                let steps = (k / 32).div_ceil(2);
                let per = steps.div_ceil(splits);
                assert!(per * (splits - 1) < steps, "{n_out} × {k}: slice {} empty", splits - 1);
                if splits > 1 {
                    assert!(per >= SPLIT_K_MIN_STEPS, "{n_out} × {k}: {per} steps per slice");
                }
            }
        }
        // A 7B model's 4096-wide products at batched decode: 64 workgroups become 512.
        assert_eq!(split_k(4096, 4096), 8);
        assert_eq!(split_k(4096, 11008), 8);
        // Wide products fill the device alone.
        assert_eq!(split_k(32000, 4096), 1);
        assert_eq!(split_k(22016, 4096), 1);
        // Short rows have few steps to share.
        assert_eq!(split_k(576, 576), 2);
        assert_eq!(coopmat_tile(4096, 48, 4096, true), CoopmatTile::ShortSplit);
        assert_eq!(coopmat_tile(4096, 48, 4096, false), CoopmatTile::Short);
        assert_eq!(coopmat_tile(4096, 65, 4096, true), CoopmatTile::Plain);
    }

    #[test]
    fn products_go_side_by_side_only_with_boundaries_on_tile_edges() {
        // Dense 7.4B Q, K, V over a 512-row chunk: the wide tiles (128 features).
        assert!(side_by_side(&[4096, 1024, 1024], 512));
        assert!(!side_by_side(&[4160, 1024, 1024], 512));
        // SmolLM2's: too few workgroups for the wide tiles, so 64-feature edges suffice.
        assert!(side_by_side(&[576, 192, 192], 512));
        // 576 is no multiple of 128, and these take the wide tiles.
        assert!(!side_by_side(&[576, 4096], 2048));
        // The last width is free; one product alone is not "side by side".
        assert!(side_by_side(&[128, 96], 100));
        assert!(!side_by_side(&[96, 128], 100));
        assert!(!side_by_side(&[4096], 512));
        assert!(!side_by_side(&[64, 64, 64, 64], 100));
    }
}
