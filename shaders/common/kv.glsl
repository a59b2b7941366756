// KV pages: page-major, so that one page (all layers, K and V) is one contiguous range. Values
// are f16, two to a word; element offsets are even because kv_dim and head_dim are even.
// Word index of (page, layer, which: 0 = K / 1 = V, slot) row start.
uint64_t kv_row_word(uint page, uint layer, uint which, uint slot, uint n_layer, uint page_size, uint kv_dim) {
    return ((uint64_t(page) * n_layer + layer) * 2ul + which) * uint64_t(page_size * kv_dim / 2u)
        + uint64_t(slot * kv_dim / 2u);
}
