#version 450
// Writes this step's K and V rows (f32) into their KV pages as f16.
#include "common/common.glsl"
#include "common/kv.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats k; Floats v; Words kv; Ints positions; Ints row_pages; Ints page_tables;
    uint kv_dim; uint layer; uint n_layer; uint page_size;
} p;
void main() {
    uint pair = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (2u * pair >= p.kv_dim) return;
    uint pos = uint(p.positions.v[r]);
    uint page = uint(p.page_tables.v[uint(p.row_pages.v[r]) + pos / p.page_size]);
    uint slot = pos % p.page_size;
    uint base = r * p.kv_dim + 2u * pair;
    uint64_t kw = kv_row_word(page, p.layer, 0u, slot, p.n_layer, p.page_size, p.kv_dim) + pair;
    uint64_t vw = kv_row_word(page, p.layer, 1u, slot, p.n_layer, p.page_size, p.kv_dim) + pair;
    words_at(p.kv, kw * 4ul).v[0] = packHalf2x16(vec2(p.k.v[base], p.k.v[base + 1u]));
    words_at(p.kv, vw * 4ul).v[0] = packHalf2x16(vec2(p.v.v[base], p.v.v[base + 1u]));
}
