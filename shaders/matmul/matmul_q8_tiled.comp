#version 450
// Weight (32-element GGUF formats, and K-quants read as 32-element blocks) × many 8-bit activation rows (prompt chunks): a tile of
// 64 output features × 64 rows per workgroup. Each 32-element block of the tile's weights
// and activations is unpacked once into shared memory as int8 words; every thread then
// computes 4 × 4 outputs with packed 4×8-bit dot products, so each weight byte fetched
// from memory serves 64 rows instead of the 8 of matmul_q8.comp. Same arithmetic per block
// as the CPU tier: d_w · d_x · Σ q_w q_x plus the format's offset term times d_x · Σ q_x.
// Expert products (mode 1: gate/up, input row slot / n_used; mode 2: down, input row slot)
// take their tile's slots from the grouping moe_group.comp wrote at `ids`: one expert per
// tile, so the tile still shares its weights.
#include "common/common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
} p;
#include "matmul/expert_tiles.glsl"

#include "blocks/qblock.glsl"
#include "blocks/q8_dot.glsl"
shared uint w_s[64][8];
shared float wd_s[64];
shared float wd2_s[64]; // the second 16 values' scale (Q2_K, Q3_K, Q6_K)
shared float woff_s[64];
#if TYPE == 10
shared float woff2_s[64]; // the second 16 values' offset (Q2_K)
#endif
shared uint x_s[64][8];
shared float xd_s[64];
shared float xs_s[64];


void main() {
    uint t = gl_LocalInvocationID.x;
    uint f0 = gl_WorkGroupID.x * 64u, r0 = gl_WorkGroupID.y * 64u;
    uint nb = p.k / 32u;
    Words wm = p.w;
    uint n_rows = p.n_rows;
    if (p.mode != 0u) {
        if (!load_expert_tile(t)) return;
        wm = words_at(p.w, uint64_t(tile_s[0]) * uint64_t(p.expert_bytes));
        n_rows = tile_s[2];
        r0 = 0u;
    }
    uint lf = t >> 2, q = t & 3u;           // loader: feature/row lf, quarter q
    uint tf = t & 15u, tr = t >> 4;         // compute: features tf + 16i, rows tr + 16j
    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++) [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    uint o_load = min(f0 + lf, p.n_out - 1u);
    bool o_ok = f0 + lf < p.n_out;
    uint r_load = min(r0 + lf, n_rows - 1u);
    bool r_ok = r0 + lf < n_rows;
    if (p.mode != 0u) r_load = p.mode == 1u ? slot_s[r_load] / p.n_used : slot_s[r_load];
    for (uint b = 0u; b < nb; b++) {
        // Weights: four threads per feature unpack one block to eight words of int8.
#if TYPE == 10 || TYPE == 11 || TYPE == 12 || TYPE == 13 || TYPE == 14 || TYPE == 20 || TYPE == 23
        // K-quants (kblock.glsl) and IQ4 (table values): each of the four reads the whole
        // block (the same lines, from cache) and keeps its quarter.
        WBlock kb = load_block(wm, o_load * p.row_bytes, b);
        w_s[lf][q] = o_ok ? kb.q[q] : 0u;
        w_s[lf][4u + q] = o_ok ? kb.q[4u + q] : 0u;
        float d = kb.d, off = kb.m;
#if TYPE == 10 || TYPE == 11 || TYPE == 14
        if (q == 0u) wd2_s[lf] = o_ok ? kb.d2 : 0.0;
#endif
#if TYPE == 10
        if (q == 0u) woff2_s[lf] = o_ok ? kb.m2 : 0.0;
#endif
#else
        uint row = o_load * p.row_bytes, qs = qs_at(row, b) >> 2, sc = sc_at(row, b);
        float d = rd_f16(wm, sc);
#if TYPE == 8
        uint lo = wm.v[qs + 2u * q], hi = wm.v[qs + 2u * q + 1u];
        w_s[lf][2u * q] = o_ok ? lo : 0u;
        w_s[lf][2u * q + 1u] = o_ok ? hi : 0u;
        float off = 0.0;
#else
        uint qw = wm.v[qs + q];
        uint lo = qw & 0x0f0f0f0fu, hi = (qw >> 4) & 0x0f0f0f0fu;
#if TYPE == 6 || TYPE == 7
        uint qh = wm.v[qh_at(row, b) >> 2];
        lo |= spread4(qh >> (4u * q));
        hi |= spread4(qh >> (16u + 4u * q));
#endif
        w_s[lf][q] = o_ok ? lo : 0u;
        w_s[lf][4u + q] = o_ok ? hi : 0u;
#if TYPE == 2
        float off = -8.0 * d;
#elif TYPE == 6
        float off = -16.0 * d;
#else
        float off = rd_f16(wm, sc + 2u);
#endif
#endif
#endif
        if (q == 0u) {
            wd_s[lf] = o_ok ? d : 0.0;
            woff_s[lf] = o_ok ? off : 0.0;
        }
        // Activations: four threads per row copy its block's eight words and (d, d·Σq).
        uint xw = r_load * (p.k / 4u) + 8u * b;
        x_s[lf][2u * q] = r_ok ? p.xq.v[xw + 2u * q] : 0u;
        x_s[lf][2u * q + 1u] = r_ok ? p.xq.v[xw + 2u * q + 1u] : 0u;
        if (q == 0u) {
            xd_s[lf] = r_ok ? p.x.v[2u * (r_load * nb + b)] : 0.0;
            xs_s[lf] = r_ok ? p.x.v[2u * (r_load * nb + b) + 1u] : 0.0;
        }
        barrier();
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint f = tf + 16u * i;
            uint wv[8];
            [[unroll]] for (uint e = 0u; e < 8u; e++) wv[e] = w_s[f][e];
            float wd = wd_s[f], wo = woff_s[f];
            [[unroll]] for (uint j = 0u; j < 4u; j++) {
                uint r = tr + 16u * j;
#if TYPE == 10 || TYPE == 11 || TYPE == 14
                int lo = 0, hi = 0;
                [[unroll]] for (uint e = 0u; e < 4u; e++) lo += dot4(wv[e], x_s[r][e]);
                [[unroll]] for (uint e = 4u; e < 8u; e++) hi += dot4(wv[e], x_s[r][e]);
#if TYPE == 10
                // Q2_K: each half's offset against the half's activation sum.
                int slo = 0, shi = 0;
                [[unroll]] for (uint e = 0u; e < 4u; e++) slo += dot4(0x01010101u, x_s[r][e]);
                [[unroll]] for (uint e = 4u; e < 8u; e++) shi += dot4(0x01010101u, x_s[r][e]);
                acc[i][j] += xd_s[r] * (wd * float(lo) + wd2_s[f] * float(hi) + wo * float(slo) + woff2_s[f] * float(shi));
#else
                acc[i][j] += xd_s[r] * (wd * float(lo) + wd2_s[f] * float(hi));
#endif
#else
                int s = 0;
                [[unroll]] for (uint e = 0u; e < 8u; e++) s += dot4(wv[e], x_s[r][e]);
                acc[i][j] += wd * xd_s[r] * float(s) + wo * xs_s[r];
#endif
            }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint o = f0 + tf + 16u * i;
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint r = r0 + tr + 16u * j;
            if (o < p.n_out && r < n_rows) {
                uint out_row = p.mode != 0u ? slot_s[r] : r;
                p.out_.v[out_row * p.n_out + o] = acc[i][j];
            }
        }
    }
}
