#version 450
// Everything between the Q/K/V products and attention, in one dispatch: qwen3's per-head RMS
// norm of Q and K (when `q_norm` is set), RoPE on Q and K in place, and this step's K and V
// rows into their KV pages as f16. One workgroup per head and row: heads 0..n_head-1 are
// query heads, the next n_head_kv are KV heads (which also store their V head). Replaces up
// to five dispatches and three barriers per layer (norm, rope ×2, kv_store); the arithmetic
// is that of rms_norm.comp, rope.comp and kv_store.comp.
#include "common.glsl"
#include "kv.glsl"
#include "rope.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats q; Floats k; Floats v; Words kv; Ints positions; Ints row_pages; Ints page_tables;
    Floats inv_freq; Floats q_norm; Floats k_norm;
    uint n_head; uint n_head_kv; uint head_dim; uint half_rot; uint neox;
    uint layer; uint n_layer; uint page_size; float eps;
} p;
shared float h_s[256];
shared float partial[64];
void main() {
    uint slot = gl_WorkGroupID.x, r = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    uint hd = p.head_dim;
    bool is_k = slot >= p.n_head;
    uint h = is_k ? slot - p.n_head : slot;
    uint width = (is_k ? p.n_head_kv : p.n_head) * hd;
    Floats x = is_k ? p.k : p.q;
    Floats g = is_k ? p.k_norm : p.q_norm;
    uint base = r * width + h * hd;
    for (uint d = t; d < hd; d += 64u) h_s[d] = x.v[base + d];
    if (uint64_t(g) != 0ul) {
        float s = 0.0;
        for (uint d = t; d < hd; d += 64u) {
            precise float sq = h_s[d] * h_s[d];
            s += sq;
        }
        partial[t] = s;
        barrier();
        for (uint n = 32u; n > 0u; n >>= 1) { if (t < n) partial[t] += partial[t + n]; barrier(); }
        precise float ms = div_rn(partial[0], float(hd)) + p.eps;
        float scale = div_rn(1.0, sqrt_rn(ms));
        for (uint d = t; d < hd; d += 64u) {
            precise float y = h_s[d] * scale * g.v[d];
            h_s[d] = y;
        }
    }
    barrier();
    float position = float(p.positions.v[r]);
    for (uint i = t; i < p.half_rot; i += 64u) {
        vec2 cs = rope_cos_sin(position, p.inv_freq.v[i]);
        float c = cs.x, s = cs.y;
        uint a = p.neox != 0u ? i : 2u * i, b = p.neox != 0u ? i + p.half_rot : 2u * i + 1u;
        float x0 = h_s[a], x1 = h_s[b];
        h_s[a] = x0 * c - x1 * s;
        h_s[b] = x0 * s + x1 * c;
    }
    barrier();
    for (uint d = t; d < hd; d += 64u) x.v[base + d] = h_s[d];
    if (!is_k) return;
    uint pos = uint(p.positions.v[r]);
    uint page = uint(p.page_tables.v[uint(p.row_pages.v[r]) + pos / p.page_size]);
    uint kv_dim = p.n_head_kv * hd;
    uint64_t kw = kv_row_word(page, p.layer, 0u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + h * hd / 2u;
    uint64_t vw = kv_row_word(page, p.layer, 1u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + h * hd / 2u;
    Words kd = words_at(p.kv, kw * 4ul), vd = words_at(p.kv, vw * 4ul);
    for (uint w = t; w < hd / 2u; w += 64u) {
        kd.v[w] = packHalf2x16(vec2(h_s[2u * w], h_s[2u * w + 1u]));
        vd.v[w] = packHalf2x16(vec2(p.v.v[base + 2u * w], p.v.v[base + 2u * w + 1u]));
    }
}
