#version 450
// Everything between the Q/K/V products and attention, in one dispatch: qwen3's per-head RMS
// norm of Q and K (when `q_norm` is set), RoPE on Q and K in place, and this step's K and V
// rows into their KV pages as f16. One workgroup per head and row: heads 0..n_head-1 are
// query heads, the next n_head_kv are KV heads (which also store their V head). Replaces up
// to five dispatches and three barriers per layer (norm, rope ×2, kv_store); the arithmetic
// is that of rms_norm.comp, rope.comp and kv_store.comp.
#include "common/common.glsl"
#include "common/kv.glsl"
#include "common/rope.glsl"
#include "attention/head_prelude.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats q; Floats k; Floats v; Words kv; Ints positions; Ints row_pages; Ints page_tables;
    Floats inv_freq; Floats q_norm; Floats k_norm;
    uint n_head; uint n_head_kv; uint head_dim; uint half_rot; uint neox;
    uint layer; uint n_layer; uint page_size; float eps;
} p;
shared float h_s[256];
shared float partial[64];
// The chain of dependent reads sets this short kernel's time, so every read that does not wait on another is
// issued first, into registers: the head's values (at most 4 per invocation: head_dim <=
// 256), its norm weights, its V values, the frequencies of its rotated pairs (at most 2), the
// row's position and page-table offset; then the KV page, which waits on those two.
void main() {
    uint slot = gl_WorkGroupID.x, r = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    uint hd = p.head_dim;
    bool is_k = slot >= p.n_head;
    uint h = is_k ? slot - p.n_head : slot;
    uint width = (is_k ? p.n_head_kv : p.n_head) * hd;
    Floats x = is_k ? p.k : p.q;
    Floats g = is_k ? p.k_norm : p.q_norm;
    bool normed = uint64_t(g) != 0ul;
    uint base = r * width + h * hd;
    float xv[4], gv[4];
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint d = min(t + 64u * j, hd - 1u);
        xv[j] = x.v[base + d];
        gv[j] = normed ? g.v[d] : 1.0;
    }
    vec2 vv[2];
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uint w = min(t + 64u * j, hd / 2u - 1u);
        vv[j] = is_k ? vec2(p.v.v[base + 2u * w], p.v.v[base + 2u * w + 1u]) : vec2(0.0);
    }
    float freq[2];
    [[unroll]] for (uint j = 0u; j < 2u; j++) freq[j] = p.inv_freq.v[min(t + 64u * j, max(p.half_rot, 1u) - 1u)];
    uint pos = uint(p.positions.v[r]), pt = uint(p.row_pages.v[r]);
    uint page = is_k ? uint(p.page_tables.v[pt + pos / p.page_size]) : 0u;
    if (normed) {
        float s = 0.0;
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            precise float sq = xv[j] * xv[j];
            s += t + 64u * j < hd ? sq : 0.0;
        }
        partial[t] = s;
        barrier();
        for (uint n = 32u; n > 0u; n >>= 1) { if (t < n) partial[t] += partial[t + n]; barrier(); }
        float scale = head_rms_scale(partial[0], hd, p.eps);
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            precise float y = xv[j] * scale * gv[j];
            xv[j] = y;
        }
    }
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        if (t + 64u * j < hd) h_s[t + 64u * j] = xv[j];
    }
    barrier();
    float position = float(pos);
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uint i = t + 64u * j;
        if (i < p.half_rot) {
            uvec2 ab = rope_pair(i, p.half_rot, p.neox != 0u);
            vec2 y = rope_rotate(vec2(h_s[ab.x], h_s[ab.y]), rope_cos_sin(position, freq[j]));
            h_s[ab.x] = y.x;
            h_s[ab.y] = y.y;
        }
    }
    barrier();
    for (uint d = t; d < hd; d += 64u) x.v[base + d] = h_s[d];
    if (!is_k) return;
    uint kv_dim = p.n_head_kv * hd;
    uint64_t kw = kv_row_word(page, p.layer, 0u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + h * hd / 2u;
    uint64_t vw = kv_row_word(page, p.layer, 1u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + h * hd / 2u;
    Words kd = words_at(p.kv, kw * 4ul), vd = words_at(p.kv, vw * 4ul);
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uint w = t + 64u * j;
        if (w < hd / 2u) {
            kd.v[w] = packHalf2x16(vec2(h_s[2u * w], h_s[2u * w + 1u]));
            vd.v[w] = packHalf2x16(vv[j]);
        }
    }
}
