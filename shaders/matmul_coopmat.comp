#version 450
// Weight (32-element GGUF formats) × many activation rows (prompt chunks) on the GPU's matrix
// units (VK_KHR_cooperative_matrix): a tile of 64 output features × 64 rows per workgroup of
// four 32-wide subgroups, each owning 32 × 32 outputs as 2 × 2 accumulators of 16 × 16.
// Per step of two 32-element blocks, every thread dequantizes one weight block and one
// 8-bit activation block into half-precision shared memory (weights d·q + offset, the
// activations d·q), then each subgroup multiplies 16 × 16 × 16 fragments with float
// accumulation. The operands are rounded to half precision, as llama.cpp's matrix-core path
// does; the tests bound the error against the CPU tier on the GPUs that have this path.
// Expert products use the same grouping as matmul_q8_tiled.comp (modes 1 and 2).
//
// Measured on an H200 (dense 7.4B, pp512): this layout beat a 128 × 128 tile of eight
// subgroups with packed stores and prefetch (2,499 tok/s against 1,880): with fewer, larger
// workgroups too few subgroups were resident to hide the per-block barriers.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
layout(local_size_x = 128) in;
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

const uint BM = 64u, BN = 64u, BK = 64u;
// Rows of the operand tiles are padded by 8 halves (16 bytes) against bank conflicts.
const uint LD = BK + 8u;

shared uint slot_s[64];
shared uint tile_s[3]; // expert, first slot, slots in this tile
shared float16_t a_s[BM * LD];  // features × k
shared float16_t b_s[BN * LD];  // rows × k
shared float c_s[BM * BN];      // results, column-major (feature fastest)

uint spread4(uint h) { return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25); }

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
    // Loader: feature / row `lf`, block `half_` of the two in this step.
    uint lf = t >> 1, half_ = t & 1u;
    uint o_load = min(f0 + lf, p.n_out - 1u);
    bool o_ok = f0 + lf < p.n_out;
    uint r_load = min(r0 + lf, n_rows - 1u);
    bool r_ok = r0 + lf < n_rows;
    if (p.mode != 0u) r_load = p.mode == 1u ? slot_s[r_load] / p.n_used : slot_s[r_load];
    // Compute: subgroup `sg` owns features wf.. and rows wr.. of the tile.
    uint sg = gl_SubgroupID;
    uint wf = (sg & 1u) * 32u, wr = (sg >> 1) * 32u;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[2][2];
    [[unroll]] for (uint i = 0u; i < 2u; i++) [[unroll]] for (uint j = 0u; j < 2u; j++)
        acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    for (uint b0 = 0u; b0 < nb; b0 += 2u) {
        uint b = b0 + half_;
        bool b_ok = b < nb;
        uint kb = half_ * 32u;
        // Weights: one block of feature lf as 32 halves.
        uint wb = o_load * p.row_bytes + min(b, nb - 1u) * BLOCK_BYTES;
        bool w_ok = o_ok && b_ok;
        float d = w_ok ? rd_f16(wm, wb) : 0.0;
#if TYPE == 8
        float off = 0.0;
        [[unroll]] for (uint q = 0u; q < 8u; q++) {
            uint v = rd_u32_even(wm, wb + QS_AT + 4u * q);
            [[unroll]] for (uint e = 0u; e < 4u; e++)
                a_s[lf * LD + kb + 4u * q + e] = float16_t(d * float(int(v << (24u - 8u * e)) >> 24));
        }
#else
#if TYPE == 2
        float off = -8.0 * d;
#elif TYPE == 6
        float off = -16.0 * d;
#else
        float off = w_ok ? rd_f16(wm, wb + 2u) : 0.0;
#endif
#if TYPE == 6 || TYPE == 7
        uint qh = rd_u32_even(wm, wb + QS_AT - 4u);
#endif
        [[unroll]] for (uint q = 0u; q < 4u; q++) {
            uint qw = rd_u32_even(wm, wb + QS_AT + 4u * q);
            uint lo = qw & 0x0f0f0f0fu, hi = (qw >> 4) & 0x0f0f0f0fu;
#if TYPE == 6 || TYPE == 7
            lo |= spread4(qh >> (4u * q));
            hi |= spread4(qh >> (16u + 4u * q));
#endif
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                a_s[lf * LD + kb + 4u * q + e] = float16_t(d * float((lo >> (8u * e)) & 0xffu) + off);
                a_s[lf * LD + kb + 16u + 4u * q + e] = float16_t(d * float((hi >> (8u * e)) & 0xffu) + off);
            }
        }
#endif
        // Activations: one 8-bit block of row lf, scaled back to halves.
        bool x_ok = r_ok && b_ok;
        uint bx = min(b, nb - 1u);
        float dx = x_ok ? p.x.v[2u * (r_load * nb + bx)] : 0.0;
        uint xw = r_load * (p.k / 4u) + 8u * bx;
        [[unroll]] for (uint q = 0u; q < 8u; q++) {
            uint v = p.xq.v[xw + q];
            [[unroll]] for (uint e = 0u; e < 4u; e++)
                b_s[lf * LD + kb + 4u * q + e] = float16_t(dx * float(int(v << (24u - 8u * e)) >> 24));
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[2];
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> bm[2];
            [[unroll]] for (uint i = 0u; i < 2u; i++)
                coopMatLoad(a[i], a_s, (wf + 16u * i) * LD + kk, LD, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint j = 0u; j < 2u; j++)
                coopMatLoad(bm[j], b_s, (wr + 16u * j) * LD + kk, LD, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < 2u; i++) [[unroll]] for (uint j = 0u; j < 2u; j++)
                acc[i][j] = coopMatMulAdd(a[i], bm[j], acc[i][j]);
        }
        barrier();
    }
    [[unroll]] for (uint i = 0u; i < 2u; i++) [[unroll]] for (uint j = 0u; j < 2u; j++)
        coopMatStore(acc[i][j], c_s, (wr + 16u * j) * BM + wf + 16u * i, BM, gl_CooperativeMatrixLayoutColumnMajor);
    barrier();
    for (uint idx = t; idx < BM * BN; idx += 128u) {
        uint m = idx % BM, n = idx / BM;
        uint o = f0 + m, r = r0 + n;
        if (o < p.n_out && r < n_rows) {
            uint out_row = p.mode != 0u ? slot_s[n] : r;
            p.out_.v[out_row * p.n_out + o] = c_s[idx];
        }
    }
}
