// Query-row tiles of prompt-chunk attention: rows 16·i .. 16·i+15 of a step form tile i.
// attention_tiled.comp takes the tiles whose rows all read one sequence's pages, and
// attention.comp (one row per workgroup) every other row; both decide with this test. Needs
// `p.row_pages`, `p.n_rows`, `p.splits`, `p.window` and `p.softcap` in the including shader's
// arguments.
#define TILE_ROWS 16u
bool tile_is_one_sequence(uint tile) {
    uint r0 = tile * TILE_ROWS, r1 = min(r0 + TILE_ROWS, p.n_rows);
    int first = p.row_pages.v[r0];
    for (uint r = r0 + 1u; r < r1; r++) if (p.row_pages.v[r] != first) return false;
    return true;
}

// The first key a query whose context holds `ctx` keys reads: 0, or with a sliding window
// (`p.window` keys, sliding-window layers) the window's first. Needs `p.window`.
uint window_first(uint ctx) {
    return p.window != 0u && ctx > p.window ? ctx - p.window : 0u;
}

// A scaled score under Gemma 2's soft cap, `cap · tanh(s / cap)`; the score itself when
// `p.softcap` is 0.
float capped(float s) {
    return p.softcap > 0.0 ? p.softcap * tanh_finite(s / p.softcap) : s;
}

// Keys [x, y) that workgroup z takes of keys [first, ctx): with key splits, one of
// `p.splits` equal ranges in whole 64-key blocks (a range may be empty); without, all of them.
uvec2 split_key_range(uint first, uint ctx) {
    if (p.splits == 0u) return uvec2(first, ctx);
    uint n = ctx - first;
    uint seg_len = ((n + p.splits - 1u) / p.splits + 63u) / 64u * 64u;
    uint begin = min(ctx, first + gl_WorkGroupID.z * seg_len);
    return uvec2(begin, min(ctx, begin + seg_len));
}
