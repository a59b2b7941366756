#version 450
// Weight (32-element GGUF formats) × many activation rows (prompt chunks) on the GPU's matrix
// units (VK_KHR_cooperative_matrix): a tile of 128 output features × BN rows per workgroup
// of eight 32-wide subgroups; with BN = 64 each owns 32 × 32 outputs (2 × 2 accumulators of
// 16 × 16), with BN = 128 (the `wide` build, plain products of long prompt chunks) 64 × 32.
// Per 32-element block, every thread turns half a weight block and a part of an 8-bit
// activation block into half-precision pairs in shared memory (weights d·q + offset,
// activations d·q), while the next block's raw words are already being fetched; then each
// subgroup multiplies 16 × 16 × 16 fragments with float accumulation. The operands are
// rounded to half precision, as llama.cpp's matrix-core path does; the tests bound the error
// against the CPU tier on the GPUs that have this path. Expert products use the grouping of
// matmul_q8_tiled.comp (modes 1 and 2, 64 slots per tile).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
} p;

#if TYPE == 2
const uint BLOCK_BYTES = 18u, QS_AT = 2u;
#elif TYPE == 3
const uint BLOCK_BYTES = 20u, QS_AT = 4u;
#elif TYPE == 6
const uint BLOCK_BYTES = 22u, QS_AT = 6u;
#elif TYPE == 7
const uint BLOCK_BYTES = 24u, QS_AT = 8u;
#elif TYPE == 8
const uint BLOCK_BYTES = 34u, QS_AT = 2u;
#endif

#ifndef BN_ROWS
#define BN_ROWS 64
#endif
const uint BM = 128u, BN = BN_ROWS;
#if BN_ROWS == 128
const uint FR = 4u, RR = 2u;    // accumulators per subgroup: features × rows, 16 each
#else
const uint FR = 2u, RR = 2u;
#endif
const uint XW = 8u * BN / 256u; // activation words per thread and block (2 or 4)
// Operand rows: 32 halves of one block plus 8 of padding (against bank conflicts), in pairs.
const uint LD2 = 20u;

shared uint slot_s[64];
shared uint tile_s[3]; // expert, first slot, slots in this tile
shared f16vec2 a_s[BM * LD2];   // features × k
shared f16vec2 b_s[BN * LD2];   // rows × k
shared float st_s[8u * 256u];   // one 16 × 16 result per subgroup on its way out

uint spread4(uint h) { return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25); }

// Raw words of the weight half-block and activation quarter-block a thread converts.
struct Raw { uvec4 w; uint qh; float d; float off; uvec4 x; float dx; };

Raw fetch(Words wm, uint o_load, bool o_ok, uint r_load, bool r_ok, uint b, uint h, uint q) {
    Raw r;
    uint wb = o_load * p.row_bytes + b * BLOCK_BYTES;
    r.d = o_ok ? rd_f16(wm, wb) : 0.0;
#if TYPE == 8
    [[unroll]] for (uint j = 0u; j < 4u; j++) r.w[j] = rd_u32_even(wm, wb + QS_AT + 16u * h + 4u * j);
    r.qh = 0u;
    r.off = 0.0;
#else
    r.w.x = rd_u32_even(wm, wb + QS_AT + 8u * h);
    r.w.y = rd_u32_even(wm, wb + QS_AT + 8u * h + 4u);
    r.w.zw = uvec2(0u);
#if TYPE == 6 || TYPE == 7
    r.qh = rd_u32_even(wm, wb + QS_AT - 4u);
#else
    r.qh = 0u;
#endif
#if TYPE == 2
    r.off = -8.0 * r.d;
#elif TYPE == 6
    r.off = -16.0 * r.d;
#else
    r.off = o_ok ? rd_f16(wm, wb + 2u) : 0.0;
#endif
#endif
    uint xw = r_load * (p.k / 4u) + 8u * b + XW * q;
    [[unroll]] for (uint j = 0u; j < XW; j++) r.x[j] = p.xq.v[xw + j];
    r.dx = r_ok ? p.x.v[2u * (r_load * (p.k / 32u) + b)] : 0.0;
    return r;
}

f16vec2 pair_u(uint v, uint e, float d, float off) {
    return f16vec2(vec2(float((v >> (8u * e)) & 0xffu), float((v >> (8u * e + 8u)) & 0xffu)) * d + off);
}
f16vec2 pair_s(uint v, uint e, float d) {
    return f16vec2(vec2(float(int(v << (24u - 8u * e)) >> 24), float(int(v << (16u - 8u * e)) >> 24)) * d);
}

void main() {
    uint t = gl_LocalInvocationID.x;
    uint f0 = gl_WorkGroupID.x * BM, r0 = gl_WorkGroupID.y * BN;
    uint nb = p.k / 32u;
    Words wm = p.w;
    uint n_rows = p.n_rows;
    if (p.mode != 0u) {
        if (t == 0u) {
            uint ne = uint(p.ids.v[0]), y = gl_WorkGroupID.y, e = 0u;
            while (e < ne && uint(p.ids.v[ne + 3u + e]) <= y) e++;
            tile_s[2] = 0u;
            if (y < uint(p.ids.v[2u * ne + 2u])) {
                uint first = uint(p.ids.v[1u + e]) + 64u * (y - uint(p.ids.v[ne + 2u + e]));
                tile_s[0] = e;
                tile_s[1] = first;
                tile_s[2] = min(64u, uint(p.ids.v[2u + e]) - first);
            }
        }
        barrier();
        if (tile_s[2] == 0u) return;
        if (t < 64u) {
            uint ne = uint(p.ids.v[0]);
            slot_s[t] = uint(p.ids.v[2u * ne + 3u + tile_s[1] + min(t, tile_s[2] - 1u)]);
        }
        barrier();
        wm = words_at(p.w, uint64_t(tile_s[0]) * uint64_t(p.expert_bytes));
        n_rows = tile_s[2];
        r0 = 0u;
    }
    // Loaders: weights feature lf, half h; activations row lr, part q of 256 / BN.
    uint lf = t >> 1, h = t & 1u, lr = t / (256u / BN), q = t % (256u / BN);
    uint o_load = min(f0 + lf, p.n_out - 1u);
    bool o_ok = f0 + lf < p.n_out;
    uint r_load = min(r0 + lr, n_rows - 1u);
    bool r_ok = r0 + lr < n_rows;
    if (p.mode != 0u) r_load = p.mode == 1u ? slot_s[r_load] / p.n_used : slot_s[r_load];
    // Compute: subgroup sg owns features wf.. and rows wr.. of the tile.
    uint sg = gl_SubgroupID;
    const uint SGF = BM / (16u * FR);  // subgroups across features
    uint wf = (sg % SGF) * 16u * FR, wr = (sg / SGF) * 16u * RR;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[FR][RR];
    [[unroll]] for (uint i = 0u; i < FR; i++) [[unroll]] for (uint j = 0u; j < RR; j++)
        acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    Raw raw = fetch(wm, o_load, o_ok, r_load, r_ok, 0u, h, q);
    for (uint b = 0u; b < nb; b++) {
        // Convert this block into shared memory.
#if TYPE == 8
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint at = lf * LD2 + 8u * h + 2u * j;
            a_s[at] = pair_s(raw.w[j], 0u, raw.d);
            a_s[at + 1u] = pair_s(raw.w[j], 2u, raw.d);
        }
#else
        [[unroll]] for (uint j = 0u; j < 2u; j++) {
            uint wj = 2u * h + j;  // word of the block's 16 quant bytes
            uint v = raw.w[j];
            uint lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
#if TYPE == 6 || TYPE == 7
            lo |= spread4(raw.qh >> (4u * wj));
            hi |= spread4(raw.qh >> (16u + 4u * wj));
#endif
            uint at = lf * LD2 + 2u * wj;
            a_s[at] = pair_u(lo, 0u, raw.d, raw.off);
            a_s[at + 1u] = pair_u(lo, 2u, raw.d, raw.off);
            a_s[at + 8u] = pair_u(hi, 0u, raw.d, raw.off);
            a_s[at + 9u] = pair_u(hi, 2u, raw.d, raw.off);
        }
#endif
        uint bt = lr * LD2 + 2u * XW * q;
        [[unroll]] for (uint j = 0u; j < XW; j++) {
            b_s[bt + 2u * j] = pair_s(raw.x[j], 0u, raw.dx);
            b_s[bt + 2u * j + 1u] = pair_s(raw.x[j], 2u, raw.dx);
        }
        barrier();
        // The next block's words are in flight while the matrix units work on this one.
        if (b + 1u < nb) raw = fetch(wm, o_load, o_ok, r_load, r_ok, b + 1u, h, q);
        [[unroll]] for (uint kk = 0u; kk < 16u; kk += 8u) {
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[FR];
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> bm[RR];
            [[unroll]] for (uint i = 0u; i < FR; i++)
                coopMatLoad(a[i], a_s, (wf + 16u * i) * LD2 + kk, LD2, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint j = 0u; j < RR; j++)
                coopMatLoad(bm[j], b_s, (wr + 16u * j) * LD2 + kk, LD2, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < FR; i++) [[unroll]] for (uint j = 0u; j < RR; j++)
                acc[i][j] = coopMatMulAdd(a[i], bm[j], acc[i][j]);
        }
        barrier();
    }
    // Each subgroup stages its fragments one at a time and writes the rows in range.
    uint lane = gl_SubgroupInvocationID, st = sg * 256u;
    [[unroll]] for (uint i = 0u; i < FR; i++) [[unroll]] for (uint j = 0u; j < RR; j++) {
        coopMatStore(acc[i][j], st_s, st, 16u, gl_CooperativeMatrixLayoutColumnMajor);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint e = lane; e < 256u; e += 32u) {
            uint m = e & 15u, n = e >> 4;
            uint o = f0 + wf + 16u * i + m, rl = wr + 16u * j + n;
            if (o < p.n_out && r0 + rl < n_rows) {
                uint out_row = p.mode != 0u ? slot_s[rl] : r0 + rl;
                p.out_.v[out_row * p.n_out + o] = st_s[st + e];
            }
        }
        subgroupBarrier();
    }
}
