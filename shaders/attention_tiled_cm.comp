#version 450
// Prompt-chunk attention on the GPU's matrix units (VK_KHR_cooperative_matrix): the same work
// as attention_tiled.comp (16-row tiles of one sequence, flash-style softmax, optional key
// splits and 8-bit output copy), with Q·Kᵀ and P·V as 16 × 16 × 16 half-precision products
// accumulating in float. A workgroup's four subgroups take two consecutive heads of one tile,
// two subgroups per head, one taking the even 64-key blocks and the other the odd ones (a
// tile's keys are walked in half the time; the last tiles of a prompt hold the most keys and
// set the kernel's length); the pair's running maxima, sums and outputs are combined through
// shared memory at the end. With grouped-query attention the heads read the same K and V,
// which the cache then serves. K and V fragments are loaded straight from the
// KV pages (a 16-key fragment lies in one page: the host takes this kernel only when pages
// hold a multiple of 16 tokens); Q (scaled by 1/√d) and the softmax weights P are rounded to
// half precision, as llama.cpp's matrix-core attention does. Per block of 64 keys a subgroup
// stores its scores, each row's two lanes update the running maximum and sum, and the output
// accumulators are rescaled through shared memory when a row's maximum moved.
//
// Keys past a row's context inside a fetched fragment are masked. They are finite: the pool
// is zero-filled when created and only ever holds K and V rows written since (0 · finite
// stays 0 in P · V).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "kv.glsl"
#include "q8.glsl"
layout(local_size_x = 128) in;
#define KEYS 64u
layout(push_constant) uniform P {
    Floats q; Words kv; Floats out_; Ints positions; Ints row_pages; Ints page_tables; Words xq; Floats xds;
    Floats partial;
    uint n_head; uint n_head_kv; uint head_dim; uint layer; uint n_layer; uint page_size; float scale;
    uint n_rows; uint skip_tiled; uint splits;
} p;
#include "attention_tiles.glsl"
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Halves { float16_t v[]; };

// Per subgroup: Q staging (16 × 128 halves), then the softmax weights P (16 × 64).
const uint QS = 136u, PS = 72u, QP_SIZE = 16u * QS;
// Per subgroup: scores (16 × 64 floats), then output staging (16 × 64).
const uint SS = 68u, S_SIZE = 16u * SS;
shared float16_t qp_s[4u * QP_SIZE];
shared float s_s[4u * S_SIZE];
shared float row_s[4][2][16]; // per row: rescale factor, then (at the end) the sum

// Byte address of the K (which = 0) or V (1) row of key `pos` for this head.
uint64_t kv_addr(uint pt, uint pos, uint which, uint kv_dim, uint kvh) {
    uint page = uint(p.page_tables.v[pt + pos / p.page_size]);
    return uint64_t(p.kv) + (kv_row_word(page, p.layer, which, pos % p.page_size, p.n_layer, p.page_size, kv_dim)
        + uint64_t(kvh * p.head_dim / 2u)) * 4ul;
}

void sync() {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}

void main() {
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    // Head of this subgroup's pair, and which half of the key blocks it takes. A pair past
    // the last head repeats the last head and writes nothing (it still meets the barriers).
    uint pair_head = gl_WorkGroupID.x * 2u + (sg >> 1), kh = sg & 1u, tile = gl_WorkGroupID.y;
    if (!tile_is_one_sequence(tile)) return;
    bool live_pair = pair_head < p.n_head;
    uint h = min(pair_head, p.n_head - 1u);
    uint hd = p.head_dim, nd = hd / 16u, kv_dim = p.n_head_kv * hd, kvh = h / (p.n_head / p.n_head_kv);
    uint r0 = tile * TILE_ROWS, n_live = min(TILE_ROWS, p.n_rows - r0);
    uint pt = uint(p.row_pages.v[r0]);
    uint qb = sg * QP_SIZE, sb = sg * S_SIZE;
    for (uint i = lane; i < 16u * hd; i += 32u) {
        uint row = i / hd, d = i % hd;
        float v = row < n_live ? p.q.v[(r0 + row) * p.n_head * hd + h * hd + d] * p.scale : 0.0;
        qp_s[qb + row * QS + d] = float16_t(v);
    }
    uint max_ctx = 0u;
    for (uint r = 0u; r < n_live; r++) max_ctx = max(max_ctx, uint(p.positions.v[r0 + r]) + 1u);
    // This lane's softmax row and half of each 64-key block.
    uint row = lane >> 1, half_ = lane & 1u;
    uint ctx = row < n_live ? uint(p.positions.v[r0 + row]) + 1u : 0u;
    sync();
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> qa[8];
    [[unroll]] for (uint c = 0u; c < 8u; c++)
        if (c < nd) coopMatLoad(qa[c], qp_s, qb + 16u * c, QS, gl_CooperativeMatrixLayoutRowMajor);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o[8];
    [[unroll]] for (uint c = 0u; c < 8u; c++) o[c] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    float m = -1.0e30, l = 0.0;
    uvec2 keys = split_key_range(max_ctx);
    uint k_begin = keys.x, k_end = keys.y;
    sync(); // Q is in registers: its staging becomes P's.
    for (uint t0 = k_begin + KEYS * kh; t0 < k_end; t0 += 2u * KEYS) {
        uint nfrag = min(4u, (k_end - t0 + 15u) / 16u);
        // Scores of the block's fragments that hold keys in range.
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            if (j < nfrag) {
                Halves kr = Halves(kv_addr(pt, t0 + 16u * j, 0u, kv_dim, kvh));
                coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> s =
                    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
                [[unroll]] for (uint c = 0u; c < 8u; c++) {
                    if (c < nd) {
                        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> kb;
                        coopMatLoad(kb, kr.v, 16u * c, kv_dim, gl_CooperativeMatrixLayoutColumnMajor);
                        s = coopMatMulAdd(qa[c], kb, s);
                    }
                }
                coopMatStore(s, s_s, sb + 16u * j, SS, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        sync();
        // Softmax bookkeeping: lanes 2r and 2r + 1 hold row r's keys 0..31 and 32..63.
        float bm = -1.0e30;
        for (uint e = 0u; e < 32u; e++) {
            uint key = 32u * half_ + e, pos = t0 + key;
            if (pos < k_end && pos < ctx) bm = max(bm, s_s[sb + row * SS + key]);
        }
        bm = max(bm, subgroupShuffleXor(bm, 1u));
        float mn = max(m, bm), corr = exp(m - mn), sum = 0.0;
        m = mn;
        for (uint e = 0u; e < 32u; e++) {
            uint key = 32u * half_ + e, pos = t0 + key;
            // Masked keys weigh zero even when every key so far was masked (a split that
            // starts past this row's context).
            float w = pos < k_end && pos < ctx ? exp(s_s[sb + row * SS + key] - mn) : 0.0;
            sum += w;
            qp_s[qb + row * PS + key] = float16_t(w);
        }
        l = l * corr + sum + subgroupShuffleXor(sum, 1u);
        if (half_ == 0u) row_s[sg][0][row] = corr;
        bool unchanged = subgroupAll(corr == 1.0);
        sync();
        if (!unchanged) {
            // Rescale the output accumulators, four fragments (64 columns) at a time.
            [[unroll]] for (uint c0 = 0u; c0 < 8u; c0 += 4u) {
                if (c0 < nd) {
                    [[unroll]] for (uint c = c0; c < c0 + 4u; c++)
                        if (c < nd) coopMatStore(o[c], s_s, sb + 16u * (c - c0), SS, gl_CooperativeMatrixLayoutRowMajor);
                    sync();
                    for (uint i = lane; i < 16u * 64u; i += 32u) {
                        uint r = i / 64u, col = i % 64u;
                        s_s[sb + r * SS + col] *= row_s[sg][0][r];
                    }
                    sync();
                    [[unroll]] for (uint c = c0; c < c0 + 4u; c++)
                        if (c < nd) coopMatLoad(o[c], s_s, sb + 16u * (c - c0), SS, gl_CooperativeMatrixLayoutRowMajor);
                    sync();
                }
            }
        }
        // P · V.
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            if (j < nfrag) {
                Halves vr = Halves(kv_addr(pt, t0 + 16u * j, 1u, kv_dim, kvh));
                coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> pa;
                coopMatLoad(pa, qp_s, qb + 16u * j, PS, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint c = 0u; c < 8u; c++) {
                    if (c < nd) {
                        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> vb;
                        coopMatLoad(vb, vr.v, 16u * c, kv_dim, gl_CooperativeMatrixLayoutRowMajor);
                        o[c] = coopMatMulAdd(pa, vb, o[c]);
                    }
                }
            }
        }
        sync();
    }
    if (half_ == 0u) {
        row_s[sg][0][row] = m;
        row_s[sg][1][row] = l;
    }
    uint row_width = p.n_head * hd, partner = sg ^ 1u, pb = partner * S_SIZE;
    bool lead = live_pair && kh == 0u;
    // Outputs, 64 columns at a time through the staging areas: the pair's halves combined
    // into normalised rows (and their 8-bit copy), or with key splits this split's maximum,
    // sum and unnormalised sums.
    [[unroll]] for (uint c0 = 0u; c0 < 8u; c0 += 4u) {
        if (c0 < nd) {
            [[unroll]] for (uint c = c0; c < c0 + 4u; c++)
                if (c < nd) coopMatStore(o[c], s_s, sb + 16u * (c - c0), SS, gl_CooperativeMatrixLayoutRowMajor);
            barrier();
            uint cols = min(64u, hd - 16u * c0);
            if (lead) {
                for (uint i = lane; i < 16u * 64u; i += 32u) {
                    uint r = i / 64u, col = i % 64u, d = 16u * c0 + col;
                    if (r >= n_live || col >= cols) continue;
                    float ma = row_s[sg][0][r], mb = row_s[partner][0][r], mm = max(ma, mb);
                    float ea = exp(ma - mm), eb = exp(mb - mm);
                    float v = s_s[sb + r * SS + col] * ea + s_s[pb + r * SS + col] * eb;
                    float sum = row_s[sg][1][r] * ea + row_s[partner][1][r] * eb;
                    if (p.splits != 0u) {
                        uint at = (((r0 + r) * p.n_head + h) * p.splits + gl_WorkGroupID.z) * (hd + 2u);
                        p.partial.v[at + 2u + d] = v;
                        if (d == 0u) {
                            p.partial.v[at] = mm;
                            p.partial.v[at + 1u] = sum;
                        }
                    } else {
                        v /= sum;
                        p.out_.v[(r0 + r) * row_width + h * hd + d] = v;
                        s_s[sb + r * SS + col] = v;
                    }
                }
                if (p.splits == 0u && uint64_t(p.xq) != 0ul) {
                    // Row `row`, block `half_` of these columns (heads are a multiple of 32
                    // wide when the copy is asked for).
                    sync();
                    uint col = 32u * half_;
                    if (row < n_live && col < cols) {
                        float blk[32];
                        for (uint j = 0u; j < 32u; j++) blk[j] = s_s[sb + row * SS + col + j];
                        store_q8_block(blk, p.xq, p.xds, ((r0 + row) * row_width + h * hd + 16u * c0 + col) / 32u);
                    }
                }
            }
            barrier();
        }
    }
}
