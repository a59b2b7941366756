#version 450
// Weight (32-element GGUF formats) × many activation rows (plain prompt-chunk products), their
// 8-bit blocks in half precision, on the GPU's matrix units (VK_KHR_cooperative_matrix). A
// workgroup of four 32-wide
// subgroups computes 64 output features × 128 rows; each subgroup owns 32 features × 64 rows
// as 2 × 4 accumulators of 16 × 16, so every fragment it loads from shared memory feeds two
// or four multiplies.
//
// Per step of two 32-element blocks, every thread unpacks one weight block into
// half-precision shared memory, two values per instruction: a byte b placed in the mantissa of
// 1024.0 (0x6400 | b) is exactly 1024 + b as a half, so (h - (1024 + zero)) · scale (+ offset)
// gives the format's value with one rounding, as llama.cpp's matrix-core path rounds its
// operands. The pairs taken that way are values (0, 2) and (1, 3) of each group of four; the
// activations arrive in half precision already in that order along k (q8_to_half.comp, once
// per product input), which a dot product does not notice, and are copied to shared memory
// as they are. Reads are issued before the multiplies of the step before they are needed, so
// their latency overlaps the matrix work: the next step's activations (from the cache, which
// every workgroup of the product shares) and the weight blocks DEPTH steps ahead (from
// memory, each workgroup its own).
//
// Results go out through a 16 × 16 staging area per subgroup, with bounds checks, so any
// row count and output width work.
//
// WIDE=1 doubles the workgroup to eight subgroups and 128 features × 128 rows: half the
// activation copying per thread and each weight block unpacked once per 128 rows; faster for
// large products, slower where it leaves too few workgroups (the host chooses).
//
// SHORT=1 keeps four subgroups and halves the rows to 64, for chunks that fit them (a step of
// up to 64 decoding streams): the 128-row tiles would spend half their multiplies on padding.
//
// How the subgroups share a tile: FW groups of features × RW groups of rows × KS shares of
// each step's k. A subgroup's outputs are MI × NJ accumulators of 16 × 16; each A fragment it
// loads from shared memory feeds NJ multiplies and each B fragment MI, and its KS-th of a
// step is BK / KS of k, that many dependent multiplies per accumulator. By default KS is 1:
// each subgroup owns 32 features × half the rows. Two build options, off until measured on
// a GPU (docs/measurements/coopmat-ksplit-2026-12-08/): SHORT_KS=4 gives every subgroup of
// the 64-row tiles (SHORT, GROUPED) all 64 × 64 outputs and a quarter of each step's k — 16
// independent multiplies per step and one fragment load per two, where a 32 × 32 quarter
// takes one load per multiply in chains of four, at the price of 128 accumulator registers
// per thread; TILE_KS=2 splits the wide and plain tiles' k two ways (64 × 64 per subgroup).
// Shares of k are added through the staging area at the end.
//
// Plain products of one input may run side by side in one dispatch (the host fuses a layer's
// Q, K and V products when each boundary falls on a tile edge): a workgroup's features
// belong to one of up to three weight matrices and outputs (`split1`, `split2`), so the
// narrow K and V products share the wide tiles of Q.
//
// SPLIT_K=1 (with SHORT) splits the k loop over the grid's z: workgroup z takes its share of
// the blocks and writes its partial sums, all `n_out` features of every row, to slice z of
// `out_` (a scratch buffer); matmul/split_sum.comp adds the slices and places products side by
// side. For products of few rows, where one workgroup per 64 features leaves most of the
// device idle while each walks the whole row.
//
// GROUPED=1 is the expert-product variant: 64-row tiles of one expert's slots, as
// moe_group.comp laid them out (the grouping matmul_q8_tiled.comp reads); mode 1 (gate/up)
// reads input row slot / n_used, mode 2 (down) row slot, and both write row slot.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common/common.glsl"
#include "blocks/qblock.glsl"
#ifndef GROUPED
#define GROUPED 0
#endif
#ifndef WIDE
#define WIDE 0
#endif
#ifndef SHORT
#define SHORT 0
#endif
#ifndef SPLIT_K
#define SPLIT_K 0
#endif
// Steps of weight blocks in flight per thread: a workgroup's weight blocks are its only reads
// from memory rather than the cache, and one step ahead left too little of their latency
// hidden; more steps cost registers (docs/measurements/coopmat-depth-2026-12-07/).
#ifndef DEPTH
#define DEPTH 4u
#endif
// Subgroups per workgroup; each owns 32 features × BN / (WARPS / FW) rows.
#if WIDE && !GROUPED
#define WARPS 8u
#else
#define WARPS 4u
#endif
layout(local_size_x = 32 * WARPS) in;
// Same layout as the other matrix kernels, the 8-bit activations' place holding their half
// copy (`xh`); `x` is unused, and `ids`, `expert_bytes`, `mode` and `n_used` serve GROUPED.
layout(push_constant) uniform P {
    Words w; Floats x; Vec4s xh; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
    // Products of one input side by side (Q, K and V; plain products only): features from
    // `split1` come from `w2` into `out2`, from `split2` from `w3` into `out3`, each boundary
    // on a tile edge; split1 = split2 = n_out for one product.
    Words w2; Words w3; Floats out2; Floats out3; uint split1; uint split2;
} p;

#if GROUPED || SHORT
const uint BN = 64u;
#else
const uint BN = 128u;
#endif
const uint THREADS = 32u * WARPS, BM = 16u * WARPS, BK = 64u;
#ifndef SHORT_KS
#define SHORT_KS 1
#endif
#ifndef TILE_KS
#define TILE_KS 1
#endif
// KS is a define so that the epilogue's shape is chosen by the preprocessor: its loops must
// unroll (a loop left rolled indexes the accumulators dynamically, which puts them all in
// local memory).
#if (GROUPED || SHORT) && SHORT_KS == 4
#define KS 4
const uint FW = 1u, RW = 1u;
#elif !(GROUPED || SHORT) && TILE_KS == 2
#define KS 2
const uint FW = BM / 64u, RW = 2u;
#else
#define KS 1
const uint FW = BM / 32u, RW = 2u;
#endif
// Row sets per activation-loader thread; 16-feature and 16-row accumulators per subgroup;
// 4-half units of each step's k per subgroup.
const uint NS = 2u * BN / THREADS, MI = BM / FW / 16u, NJ = BN / RW / 16u, KU = BK / 4u / uint(KS);
// A row of an operand tile in 4-half units, padded by 8 halves against bank conflicts.
const uint LD = (BK + 8u) / 4u;

shared f16vec4 a_s[BM * LD];  // features × k
shared f16vec4 b_s[BN * LD];  // rows × k
shared float stage_s[WARPS * 256u];
#if GROUPED
#include "matmul/expert_tiles.glsl"
#endif

#if TYPE == 2
const float ZERO = 8.0;
#elif TYPE == 6
const float ZERO = 16.0;
#elif TYPE == 8 || TYPE == 11 || TYPE == 14 || TYPE == 20 || TYPE == 23
const float ZERO = 128.0; // int8 values (Q3_K's q − 4, Q6_K's q − 32, IQ4's table values), their sign bit flipped
#else
const float ZERO = 0.0;
#endif

// Values (0, 2) (sh = 0) or (1, 3) (sh = 8) of the four bytes of `w` as 1024 + byte.
f16vec2 byte_pair(uint w, uint sh) { return unpackFloat2x16(((w >> sh) & 0x00ff00ffu) | 0x64006400u); }

// Four words of 8-bit values (16 values) into four f16vec4 in the pair order above.
void put16(inout f16vec4 dst[4], uvec4 q, f16vec2 zero, f16vec2 d, f16vec2 m) {
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        f16vec2 e = (byte_pair(q[i], 0u) - zero) * d + m;
        f16vec2 o = (byte_pair(q[i], 8u) - zero) * d + m;
        dst[i] = f16vec4(e, o);
    }
}

// The activation blocks this thread copies: rows lr + THREADS / 2 · s of the tile, block
// `xb` of the step, four 16-byte words each.
struct XRaw { uvec4 q[NS][4]; };

// Block `b` of rows xrow[] of the half copy.
XRaw load_x(uint xrow[NS], uint b) {
    XRaw r;
    [[unroll]] for (uint s = 0u; s < NS; s++)
        [[unroll]] for (uint i = 0u; i < 4u; i++) r.q[s][i] = p.xh.v[(xrow[s] * p.k + 32u * b) / 8u + i];
    return r;
}

void main() {
    uint t = gl_LocalInvocationID.x;
    uint f0 = gl_WorkGroupID.x * BM, r0 = gl_WorkGroupID.y * BN;
    uint nb = p.k / 32u;
    Words wm = p.w;
    Floats outm = p.out_;
    uint n_rows = p.n_rows, n_out = p.n_out;
#if SPLIT_K
    // Steps of two blocks, shared as evenly as the grid allows; a slice past the row stays
    // zero.
    uint steps = (nb + 1u) / 2u, per = (steps + gl_NumWorkGroups.z - 1u) / gl_NumWorkGroups.z;
    uint kb0 = min(2u * per * gl_WorkGroupID.z, nb), kb1 = min(kb0 + 2u * per, nb);
    uint slice = gl_WorkGroupID.z * n_rows;
#else
    uint kb0 = 0u, kb1 = nb, slice = 0u;
#endif
#if !GROUPED
    if (f0 >= p.split2) {
        wm = p.w3;
        outm = p.out3;
        f0 -= p.split2;
        n_out = p.n_out - p.split2;
    } else if (f0 >= p.split1) {
        wm = p.w2;
        outm = p.out2;
        f0 -= p.split1;
        n_out = p.split2 - p.split1;
    } else {
        n_out = p.split1;
    }
#endif
    // Where results go: feature f0 + i of their product's output (`n_out` wide), or with
    // SPLIT_K feature gl_WorkGroupID.x · BM + i of the scratch slice (every product's features).
#if SPLIT_K
    Floats dst = p.out_;
    uint dst_f0 = gl_WorkGroupID.x * BM, dst_width = p.n_out;
#else
    Floats dst = outm;
    uint dst_f0 = f0, dst_width = n_out;
#endif
#if GROUPED
    if (!load_expert_tile(t)) return;
    wm = words_at(p.w, uint64_t(tile_s[0]) * uint64_t(p.expert_bytes));
    n_rows = tile_s[2];
    r0 = 0u;
#endif
    // Weight loader: feature `lf`, block `wh` of the step's two.
    uint lf = t >> 1, wh = t & 1u;
    bool o_ok = f0 + lf < n_out;
    uint w_row = min(f0 + lf, n_out - 1u) * p.row_bytes;
    // Activation loader: rows lr + THREADS / 2 · s, block `xb` of the step's two.
    uint lr = t >> 1, xb = t & 1u;
    uint xrow[NS];
    bool x_ok[NS];
    [[unroll]] for (uint s = 0u; s < NS; s++) {
        uint r = r0 + lr + THREADS / 2u * s;
        x_ok[s] = r < n_rows;
        xrow[s] = min(r, n_rows - 1u);
#if GROUPED
        xrow[s] = p.mode == 1u ? slot_s[xrow[s]] / p.n_used : slot_s[xrow[s]];
#endif
    }
    // Compute: subgroup `sg` owns features wf.. and rows wr.. of the tile.
    uint sg = gl_SubgroupID;
#if KS > 1
    // Subgroup `sg` takes share kg of each step's k for outputs wsg of the tile.
    uint kg = sg / (FW * RW), wsg = sg % (FW * RW);
#else
    uint wsg = sg;
#endif
    uint wf = (wsg % FW) * (BM / FW), wr = (wsg / FW) * (BN / RW);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[MI][NJ];
    [[unroll]] for (uint i = 0u; i < MI; i++) [[unroll]] for (uint j = 0u; j < NJ; j++)
        acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);

    // The weight blocks of the first DEPTH steps, and step 0's activations.
    RawBlock wq[DEPTH];
    XRaw xraw;
#if SPLIT_K
    // A slice past the row reads nothing.
    if (kb0 < kb1)
#endif
    {
        [[unroll]] for (uint d = 0u; d < DEPTH; d++) wq[d] = load_raw(wm, w_row, min(kb0 + 2u * d + wh, kb1 - 1u));
        xraw = load_x(xrow, min(kb0 + xb, kb1 - 1u));
    }
    const f16vec2 wzero = f16vec2(float16_t(1024.0 + ZERO));
    for (uint b0 = kb0; b0 < kb1; b0 += 2u * DEPTH) {
        // DEPTH steps with the ring's slots named statically (a dynamically indexed array
        // would live in local memory); `bs` is the same in the whole workgroup.
        [[unroll]] for (uint d = 0u; d < DEPTH; d++) {
            uint bs = b0 + 2u * d;
            if (bs >= kb1) break;
            // Unpack this step's blocks into shared memory.
            {
                bool ok = o_ok && bs + wh < kb1;
                WBlock wb = unpack_block(wq[d]);
                f16vec2 dd = f16vec2(float16_t(ok ? wb.d : 0.0));
#if TYPE == 10 || TYPE == 11 || TYPE == 14
                // Q2_K, Q3_K, Q6_K: a scale per 16 values.
                f16vec2 d2 = f16vec2(float16_t(ok ? wb.d2 : 0.0));
#else
                f16vec2 d2 = dd;
#endif
#if TYPE == 3 || TYPE == 7 || TYPE == 10 || TYPE == 12 || TYPE == 13
                f16vec2 m = f16vec2(float16_t(ok ? wb.m : 0.0));
#else
                f16vec2 m = f16vec2(float16_t(0.0));
#endif
#if TYPE == 8 || TYPE == 11 || TYPE == 14 || TYPE == 20 || TYPE == 23
                [[unroll]] for (uint i = 0u; i < 8u; i++) wb.q[i] ^= 0x80808080u;
#endif
                f16vec4 v[4];
                put16(v, uvec4(wb.q[0], wb.q[1], wb.q[2], wb.q[3]), wzero, dd, m);
                [[unroll]] for (uint i = 0u; i < 4u; i++) a_s[lf * LD + 8u * wh + i] = v[i];
#if TYPE == 10
                // Q2_K: an offset per 16 values too.
                put16(v, uvec4(wb.q[4], wb.q[5], wb.q[6], wb.q[7]), wzero, d2, f16vec2(float16_t(ok ? wb.m2 : 0.0)));
#else
                put16(v, uvec4(wb.q[4], wb.q[5], wb.q[6], wb.q[7]), wzero, d2, m);
#endif
                [[unroll]] for (uint i = 0u; i < 4u; i++) a_s[lf * LD + 8u * wh + 4u + i] = v[i];
            }
            [[unroll]] for (uint s = 0u; s < NS; s++) {
                // Rows past the chunk and blocks past the row are zeros.
                bool ok = x_ok[s] && bs + xb < kb1;
                uint row = (lr + THREADS / 2u * s) * LD + 8u * xb;
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    uvec4 q = ok ? xraw.q[s][i] : uvec4(0u);
                    b_s[row + 2u * i] = f16vec4(unpackFloat2x16(q.x), unpackFloat2x16(q.y));
                    b_s[row + 2u * i + 1u] = f16vec4(unpackFloat2x16(q.z), unpackFloat2x16(q.w));
                }
            }
            barrier();
            // Refill the slot just unpacked with the blocks DEPTH steps on, and read the next
            // step's activations (from the cache: every workgroup of the product reads them);
            // both are in flight during this step's multiplies.
            if (bs + 2u * DEPTH < kb1) wq[d] = load_raw(wm, w_row, min(bs + 2u * DEPTH + wh, kb1 - 1u));
            if (bs + 2u < kb1) xraw = load_x(xrow, min(bs + 2u + xb, kb1 - 1u));
            [[unroll]] for (uint ku = 0u; ku < KU; ku += 4u) {
#if KS > 1
                uint kk = kg * KU + ku;
#else
                uint kk = ku;
#endif
                coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[MI];
                [[unroll]] for (uint i = 0u; i < MI; i++)
                    coopMatLoad(a[i], a_s, (wf + 16u * i) * LD + kk, LD, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint j = 0u; j < NJ; j++) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> bm;
                    coopMatLoad(bm, b_s, (wr + 16u * j) * LD + kk, LD, gl_CooperativeMatrixLayoutColumnMajor);
                    [[unroll]] for (uint i = 0u; i < MI; i++) acc[i][j] = coopMatMulAdd(a[i], bm, acc[i][j]);
                }
            }
            barrier();
        }
    }
#if KS == 1
    // Each subgroup writes its accumulators through its own staging area.
    uint lane = gl_SubgroupInvocationID;
    [[unroll]] for (uint i = 0u; i < MI; i++) [[unroll]] for (uint j = 0u; j < NJ; j++) {
        coopMatStore(acc[i][j], stage_s, sg * 256u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint e = 0u; e < 8u; e++) {
            uint idx = lane + 32u * e;
            uint o = wf + 16u * i + (idx & 15u), r = r0 + wr + 16u * j + (idx >> 4);
            if (f0 + o < n_out && r < n_rows) {
#if GROUPED
                r = slot_s[r];
#endif
                dst.v[(slice + r) * dst_width + dst_f0 + o] = stage_s[sg * 256u + idx];
            }
        }
        subgroupBarrier();
    }
#else
    // Each subgroup stages its accumulators in its own area; the first share's subgroup adds
    // the others' (in share order) and writes the sums. Every loop here unrolls (KS is a
    // define): one left rolled would index the accumulators dynamically and keep them all in
    // local memory (backends/vulkan/src/spirv_checks.rs).
    uint lane = gl_SubgroupInvocationID;
    const uint other = FW * RW * 256u;
    [[unroll]] for (uint i = 0u; i < MI; i++) [[unroll]] for (uint j = 0u; j < NJ; j++) {
        coopMatStore(acc[i][j], stage_s, sg * 256u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
        barrier();
        [[unroll]] for (uint e = 0u; e < 8u; e++) {
            uint idx = sg * 256u + lane + 32u * e;
            uint o = wf + 16u * i + (lane & 15u), r = r0 + wr + 16u * j + 2u * e + (lane >> 4);
            if (kg == 0u && f0 + o < n_out && r < n_rows) {
#if KS == 4
                float v = stage_s[idx] + stage_s[idx + other] + stage_s[idx + 2u * other] + stage_s[idx + 3u * other];
#else
                float v = stage_s[idx] + stage_s[idx + other];
#endif
#if GROUPED
                r = slot_s[r];
#endif
                dst.v[(slice + r) * dst_width + dst_f0 + o] = v;
            }
        }
        barrier();
    }
#endif
}
