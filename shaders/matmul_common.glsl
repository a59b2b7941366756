// Shared parts of the matrix kernels. A workgroup of 64 computes RPW output features, TPR
// threads (a subgroup on most GPUs) each, reading consecutive weight bytes, for up to ROWS
// activation rows (mode 0), or for one row whose weight matrix
// is an expert picked by the router (mode 1: gate/up, input row r / n_used; mode 2: down,
// input row r). Partial sums meet in shared memory after a single barrier (portable to
// devices whose subgroups are narrower than TPR, such as lavapipe's).
layout(local_size_x = 64) in;
#define ROWS 8
#define TPR 32u
#define RPW (64u / TPR)
#if defined(ROPE_KV) && ROPE_KV
// Q, K or V product of a llama layer with RoPE and the KV store as its epilogue (row kernel
// only, plain products): `role` 0 rotates Q pairs (2i, 2i+1) in place, 1 rotates K pairs and
// writes them to the KV pages, 2 writes V to the KV pages. A workgroup's two features are
// one such pair, so no other workgroup's result is needed.
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints positions; Floats inv_freq; Words kv; Ints row_pages;
    Ints page_tables;
    uint k; uint n_out; uint n_rows; uint row_bytes;
    uint head_dim; uint half_rot; uint layer; uint n_layer; uint page_size; uint role;
} p;
#define P_MODE 0u
#else
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
} p;
#define P_MODE p.mode
#endif
shared float red[ROWS][64];

uint out_feature() { return (gl_WorkGroupID.x + gl_WorkGroupID.z * 65535u) * RPW + gl_LocalInvocationID.x / TPR; }
uint lane() { return gl_LocalInvocationID.x % TPR; }

#if !(defined(ROPE_KV) && ROPE_KV)
// Weight matrix and input row for expert modes.
Words expert_matrix(uint r) { return words_at(p.w, uint64_t(p.ids.v[r]) * uint64_t(p.expert_bytes)); }
uint input_row(uint r) { return p.mode == 1u ? r / p.n_used : r; }
#endif

#if !(defined(ROPE_KV) && ROPE_KV)
// Sums each row's partial results across the workgroup and writes them. With SG_REDUCE
// (subgroups of exactly TPR threads, so one output's threads are one subgroup) a subgroup
// sum replaces the shared-memory exchange.
void reduce_and_store(float acc[ROWS], uint o, uint r0, uint n) {
#if defined(SG_REDUCE) && SG_REDUCE
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = subgroupAdd(acc[j]);
        if (lane() == 0u && o < p.n_out) p.out_.v[(r0 + j) * p.n_out + o] = s;
    }
#else
    uint t = gl_LocalInvocationID.x;
    for (uint j = 0u; j < ROWS; j++) red[j][t] = acc[j];
    barrier();
    if (lane() != 0u || o >= p.n_out) return;
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = 0.0;
        for (uint i = 0u; i < TPR; i++) s += red[j][t + i];
        p.out_.v[(r0 + j) * p.n_out + o] = s;
    }
#endif
}
#endif

#if defined(ROPE_KV) && ROPE_KV
#include "kv.glsl"
#include "rope.glsl"
shared float pair_s[ROWS][2];
// The row sums of this workgroup's feature pair (o even, o + 1), rotated and stored as
// `role` says.
void reduce_and_store(float acc[ROWS], uint o, uint r0, uint n) {
    uint t = gl_LocalInvocationID.x, slot = t / TPR;
#if defined(SG_REDUCE) && SG_REDUCE
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = subgroupAdd(acc[j]);
        if (lane() == 0u) pair_s[j][slot] = s;
    }
#else
    for (uint j = 0u; j < ROWS; j++) red[j][t] = acc[j];
    barrier();
    if (lane() == 0u) {
        for (uint j = 0u; j < ROWS; j++) {
            if (j >= n) break;
            float s = 0.0;
            for (uint i = 0u; i < TPR; i++) s += red[j][t + i];
            pair_s[j][slot] = s;
        }
    }
#endif
    barrier();
    // Thread 0 holds feature o of slot 0, the pair's even one; widths are even.
    if (t != 0u || o >= p.n_out) return;
    uint i = (o % p.head_dim) / 2u;
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        uint r = r0 + j;
        float x0 = pair_s[j][0], x1 = pair_s[j][1];
        if (p.role != 2u && i < p.half_rot) {
            vec2 cs = rope_cos_sin(float(p.positions.v[r]), p.inv_freq.v[i]);
            float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
            x0 = y0;
            x1 = y1;
        }
        p.out_.v[r * p.n_out + o] = x0;
        p.out_.v[r * p.n_out + o + 1u] = x1;
        if (p.role != 0u) {
            uint pos = uint(p.positions.v[r]);
            uint page = uint(p.page_tables.v[uint(p.row_pages.v[r]) + pos / p.page_size]);
            uint64_t w = kv_row_word(page, p.layer, p.role - 1u, pos % p.page_size, p.n_layer, p.page_size, p.n_out);
            words_at(p.kv, (w + o / 2u) * 4ul).v[0] = packHalf2x16(vec2(x0, x1));
        }
    }
}
#endif
