// Query-row tiles of prompt-chunk attention: rows 16·i .. 16·i+15 of a step form tile i.
// attention_tiled.comp takes the tiles whose rows all read one sequence's pages, and
// attention.comp (one row per workgroup) every other row; both decide with this test. Needs
// `p.row_pages`, `p.n_rows` and `p.splits` in the including shader's push constants.
#define TILE_ROWS 16u
bool tile_is_one_sequence(uint tile) {
    uint r0 = tile * TILE_ROWS, r1 = min(r0 + TILE_ROWS, p.n_rows);
    int first = p.row_pages.v[r0];
    for (uint r = r0 + 1u; r < r1; r++) if (p.row_pages.v[r] != first) return false;
    return true;
}

// Keys [x, y) that workgroup z takes of a context of `ctx` keys: with key splits, one of
// `p.splits` equal ranges in whole 64-key blocks (a range may be empty); without, all of them.
uvec2 split_key_range(uint ctx) {
    if (p.splits == 0u) return uvec2(0u, ctx);
    uint seg_len = ((ctx + p.splits - 1u) / p.splits + 63u) / 64u * 64u;
    uint first = min(ctx, gl_WorkGroupID.z * seg_len);
    return uvec2(first, min(ctx, first + seg_len));
}
