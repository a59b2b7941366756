// Push constants of the products over 8-bit and f32 activation rows (row kernels, and the
// expert decode kernel matvec_q8.comp), and what a feature index selects from them: which of up to
// three products side by side it belongs to, its expert's matrix, and, with ROPE_KV, how a
// rotated Q/K pair or a V pair is stored. Needs common.glsl.
#ifndef MATMUL_PUSH_GLSL
#define MATMUL_PUSH_GLSL
#if defined(ROPE_KV) && ROPE_KV
// A layer's Q, K and V products with RoPE and the KV store as their epilogue (row kernel
// only, plain products), side by side in one dispatch: features below `split1` are Q's (from
// `w`, rotated in pairs (2i, 2i+1) and written to `out_`), up to `split2` K's (from `w2`,
// rotated and written to the KV pages), the rest V's (from `w3`, written to the KV pages). A
// product alone sets the other ranges empty. A workgroup's two features are one such pair,
// so no other workgroup's result is needed. `head_rot` is head_dim | half_rot << 16 (the
// push constants hold 128 bytes).
#if defined(SHARED_X) && SHARED_X
// With SHARED_X (decode, one row, the RMS norm before the products folded in: see
// matmul_q8.comp's stage_normed_row) the 8-bit row is not read: `x` is the f32 row before the
// norm, `norm_w` the norm's weights in the 8-bit row's place and `eps` in the row count's (one).
layout(push_constant) uniform P {
    Words w; Floats x; Floats norm_w; Floats out_; Ints positions; Floats inv_freq; Words kv; Ints row_pages;
    Ints page_tables; Words w2; Words w3;
    uint k; uint n_out; float eps; uint row_bytes;
    uint head_rot; uint layer; uint n_layer; uint page_size; uint split1; uint split2;
} p;
#else
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints positions; Floats inv_freq; Words kv; Ints row_pages;
    Ints page_tables; Words w2; Words w3;
    uint k; uint n_out; uint n_rows; uint row_bytes;
    uint head_rot; uint layer; uint n_layer; uint page_size; uint split1; uint split2;
} p;
#endif
// Which product feature `o` belongs to (0 Q, 1 K, 2 V), where that product's features start,
// how many it has, and its weights.
uint role_of(uint o) { return o >= p.split2 ? 2u : o >= p.split1 ? 1u : 0u; }
uint role_start(uint role) { return role == 2u ? p.split2 : role == 1u ? p.split1 : 0u; }
uint role_width(uint role) { return role == 2u ? p.n_out - p.split2 : role == 1u ? p.split2 - p.split1 : p.split1; }
Words role_matrix(uint role) { return role == 2u ? p.w3 : role == 1u ? p.w2 : p.w; }
#define P_MODE 0u
#elif defined(COMBINE) && COMBINE
// The experts' down products of each row's chosen slots summed with the router's weights
// (matvec_q8.comp's COMBINE variant): out_[r] = Σ_s slot_w[r, s] · W_ids[r, s] · x[r · n_used
// + s], the slots in ascending expert order as moe_route.comp wrote them. With `accumulate`
// set the sum is added to out_ (the residual add after the MoE block, folded in).
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids; Floats slot_w;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint n_used; uint accumulate;
} p;
#define P_MODE 2u
#elif defined(SWIGLU) && SWIGLU
// The experts' gate (`w`) and up (`w2`) products of each slot with SwiGLU and its 8-bit copy
// as their epilogue (matvec_q8.comp's SWIGLU variant): the copy's words to `out_q`, each
// block's (d, d·Σq) to `out_ds`, as swiglu_q8.comp writes them; the slot's input row is
// slot / n_used. With `logits` set the kernel also does the router's top-k itself (see
// matvec_q8.comp's route_row): each slot's expert is the one of rank slot % n_used among its
// row's `n_expert` logits, and the first workgroup of each row writes the row's chosen ids
// and weights to `ids` and `slot_w` for the down products after it.
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Words out_q; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint n_used;
    Words w2; Floats out_ds; Floats logits; Floats slot_w; uint n_expert;
} p;
#define P_MODE 1u
#else
// Products of one input may run side by side (the row kernels at decode: a layer's Q, K and
// V, or gate and up, or the experts' gate and up): features from `split1` come from `w2` into
// `out2`, from `split2` from `w3` into `out3`; split1 = split2 = n_out for one product.
// The decode kernel that stages its activation row (matmul_q8.comp's SHARED_X) also reads the
// last three: with `norm_w` set, `x` is an f32 row that it normalises (RMS norm with `eps`,
// times `norm_w`) and quantizes itself; with `accumulate` set, it adds each result to the
// output instead of storing it (the residual add after the product). The f32 decode product
// (matmul.comp) reads `norm_w` and `eps` too: with `norm_w` set it normalises `x` itself and
// writes the normalised row's 8-bit copy to `xq` and `out2` (an MoE router, nothing beside).
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
    Words w2; Words w3; Floats out2; Floats out3; uint split1; uint split2;
    Floats norm_w; float eps; uint accumulate;
} p;
#define P_MODE p.mode
#endif
#if (defined(COMBINE) && COMBINE) || (defined(SWIGLU) && SWIGLU)
// Weight matrix of expert `id`, and of the expert in slot `slot`.
Words expert_weights(Words w, uint id) { return words_at(w, uint64_t(id) * uint64_t(p.expert_bytes)); }
Words expert_matrix(Words w, uint slot) { return expert_weights(w, uint(p.ids.v[slot])); }
#elif !(defined(ROPE_KV) && ROPE_KV)
// The product that output feature `o` belongs to: its weights, its output, the feature's
// index in it and its width.
struct Part { Words w; Floats out_; uint f; uint width; };
Part part_of(uint o) {
    if (o >= p.split2) return Part(p.w3, p.out3, o - p.split2, p.n_out - p.split2);
    if (o >= p.split1) return Part(p.w2, p.out2, o - p.split1, p.split2 - p.split1);
    return Part(p.w, p.out_, o, p.split1);
}
// Weight matrix (of the product `w`) and input row for expert modes.
Words expert_matrix(Words w, uint r) { return words_at(w, uint64_t(p.ids.v[r]) * uint64_t(p.expert_bytes)); }
uint input_row(uint r) { return p.mode == 1u ? r / p.n_used : r; }
#endif

#if defined(ROPE_KV) && ROPE_KV
#include "common/kv.glsl"
#include "common/rope.glsl"
// Features o (even) and o + 1 of activation row r: rotated (Q and K, within the rotated part
// of a head) and written to `out_` (Q) or to the KV pages (K, V). Widths and splits are even,
// so a pair never straddles two products.
void store_rope_pair(uint o, uint r, float x0, float x1) {
    uint role = role_of(o), f = o - role_start(role), width = role_width(role);
    uint head_dim = p.head_rot & 0xffffu, half_rot = p.head_rot >> 16;
    uint i = (f % head_dim) / 2u;
    if (role != 2u && i < half_rot) {
        vec2 cs = rope_cos_sin(float(p.positions.v[r]), p.inv_freq.v[i]);
        float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
        x0 = y0;
        x1 = y1;
    }
    if (role == 0u) {
        p.out_.v[r * width + f] = x0;
        p.out_.v[r * width + f + 1u] = x1;
    } else {
        uint pos = uint(p.positions.v[r]);
        uint page = uint(p.page_tables.v[uint(p.row_pages.v[r]) + pos / p.page_size]);
        uint64_t w = kv_row_word(page, p.layer, role - 1u, pos % p.page_size, p.n_layer, p.page_size, width);
        words_at(p.kv, (w + f / 2u) * 4ul).v[0] = packHalf2x16(vec2(x0, x1));
    }
}
#endif
#endif
