#version 450
// Prompt-chunk attention on the GPU's matrix units (VK_KHR_cooperative_matrix): the same work
// as attention_tiled.comp (16-row tiles of one sequence, flash-style softmax, optional key
// splits and 8-bit output copy), with Q·Kᵀ and P·V as 16 × 16 × 16 half-precision products
// accumulating in float. A workgroup's four subgroups take up to four heads that read the
// same KV head (grouped-query attention) for one tile; each 64-key block of K, then of V, is
// staged once in shared memory for all four, every thread reading 16 bytes at a time, and the
// matrix loads come from there. The next block's loads are issued before the current block's
// work that does not need them (V's during the softmax, the next K's during P · V), so memory
// latency overlaps it. A 16-key fragment lies in one page (the host takes this kernel only
// when pages hold a multiple of 16 tokens). Q (scaled by 1/√d) and the softmax weights P are
// rounded to half precision, as llama.cpp's matrix-core attention does. Per block a subgroup
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
#include "common/common.glsl"
#include "common/kv.glsl"
#include "common/q8.glsl"
layout(local_size_x = 128) in;
#define KEYS 64u
layout(push_constant) uniform P {
    Floats q; Words kv; Floats out_; Ints positions; Ints row_pages; Ints page_tables; Words xq; Floats xds;
    Floats partial;
    uint n_head; uint n_head_kv; uint head_dim; uint layer; uint n_layer; uint page_size; float scale;
    uint n_rows; uint skip_tiled; uint splits;
    uint window; // keys a query reads up to its own (sliding-window layers), 0 for all
    float softcap; // soft cap on scaled scores (Gemma 2), 0 for none
} p;
#include "attention/attention_tiles.glsl"

// The staged block: 64 rows (keys) of up to 128 halves, in 4-half units, padded by 8 halves
// against bank conflicts. At the start it holds each subgroup's 16 rows of Q instead.
const uint LD = 34u;
shared f16vec4 kv_s[KEYS * LD];
// Per subgroup: scores (16 × 64 floats), also output staging (16 × 64); softmax weights P.
const uint SS = 68u, S_SIZE = 16u * SS, PS = 72u, P_SIZE = 16u * PS;
shared float s_s[4u * S_SIZE];
shared f16vec4 p_s[4u * P_SIZE / 4u];
shared float row_s[4][2][16]; // per row: rescale factor, then (at the end) maximum and sum

// Byte address of the K (which = 0) or V (1) row of key `pos` for this KV head.
uint64_t kv_addr(uint pt, uint pos, uint which, uint kv_dim, uint kvh) {
    uint page = uint(p.page_tables.v[pt + pos / p.page_size]);
    return uint64_t(p.kv) + (kv_row_word(page, p.layer, which, pos % p.page_size, p.n_layer, p.page_size, kv_dim)
        + uint64_t(kvh * p.head_dim / 2u)) * 4ul;
}

// This thread's share of a block's K or V rows (16 bytes each, 8 per thread at head_dim
// 128): the first 16·nfrag keys from `t0`.
void load_block(out uvec4 v[8], uint pt, uint t0, uint nfrag, uint which, uint kv_dim, uint kvh) {
    uint per_row = p.head_dim / 8u, n = 16u * nfrag * per_row;
    [[unroll]] for (uint u = 0u; u < 8u; u++) {
        uint i = gl_LocalInvocationIndex + 128u * u, key = i / per_row;
        v[u] = uvec4(0u);
        if (i < n) v[u] = Vec4s(kv_addr(pt, t0 + key, which, kv_dim, kvh)).v[i % per_row];
    }
}

void store_block(uvec4 v[8], uint nfrag) {
    uint per_row = p.head_dim / 8u, n = 16u * nfrag * per_row;
    [[unroll]] for (uint u = 0u; u < 8u; u++) {
        uint i = gl_LocalInvocationIndex + 128u * u, at = (i / per_row) * LD + 2u * (i % per_row);
        if (i < n) {
            kv_s[at] = f16vec4(unpackFloat2x16(v[u].x), unpackFloat2x16(v[u].y));
            kv_s[at + 1u] = f16vec4(unpackFloat2x16(v[u].z), unpackFloat2x16(v[u].w));
        }
    }
}

void sync() {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}

void main() {
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, tile = gl_WorkGroupID.y;
    if (!tile_is_one_sequence(tile)) return;
    // The KV head of this workgroup and this subgroup's head among those reading it. A
    // subgroup past the group's last head repeats its first and writes nothing (it still
    // stages its share and meets the barriers).
    uint group = p.n_head / p.n_head_kv, wgs_per_kv = (group + 3u) / 4u;
    uint kvh = gl_WorkGroupID.x / wgs_per_kv, local = (gl_WorkGroupID.x % wgs_per_kv) * 4u + sg;
    bool live = local < group;
    uint h = kvh * group + (live ? local : 0u);
    uint hd = p.head_dim, nd = hd / 16u, kv_dim = p.n_head_kv * hd;
    uint r0 = tile * TILE_ROWS, n_live = min(TILE_ROWS, p.n_rows - r0);
    uint pt = uint(p.row_pages.v[r0]);
    uint sb = sg * S_SIZE, pb = sg * P_SIZE / 4u;
    // Q's 16 rows of this head, scaled, into rows 16·sg .. of the staging block.
    Vec4s q4 = Vec4s(uint64_t(p.q));
    for (uint i = lane; i < 4u * hd; i += 32u) {
        uint row = i / (hd / 4u), c = i % (hd / 4u);
        vec4 v = row < n_live ? uintBitsToFloat(q4.v[((r0 + row) * p.n_head * hd + h * hd) / 4u + c]) * p.scale : vec4(0.0);
        kv_s[(16u * sg + row) * LD + c] = f16vec4(v);
    }
    uint max_ctx = 0u, min_first = 0xffffffffu;
    for (uint r = 0u; r < n_live; r++) {
        uint rc = uint(p.positions.v[r0 + r]) + 1u;
        max_ctx = max(max_ctx, rc);
        min_first = min(min_first, window_first(rc));
    }
    // This lane's softmax row and half of each 64-key block; the row's keys are [first, ctx).
    uint row = lane >> 1, half_ = lane & 1u;
    uint ctx = row < n_live ? uint(p.positions.v[r0 + row]) + 1u : 0u;
    uint first = window_first(ctx);
    barrier();
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> qa[8];
    [[unroll]] for (uint c = 0u; c < 8u; c++)
        if (c < nd) coopMatLoad(qa[c], kv_s, 16u * sg * LD + 4u * c, LD, gl_CooperativeMatrixLayoutRowMajor);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o[8];
    [[unroll]] for (uint c = 0u; c < 8u; c++) o[c] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    float m = -1.0e30, l = 0.0;
    // Key blocks from a multiple of 64 (rows' keys before their first are masked), so that
    // every 16-key fragment stays in one page.
    uvec2 keys = split_key_range(min_first / KEYS * KEYS, max_ctx);
    uint k_begin = keys.x, k_end = keys.y;
    uvec4 staged[8];
    if (k_begin < k_end) load_block(staged, pt, k_begin, min(4u, (k_end - k_begin + 15u) / 16u), 0u, kv_dim, kvh);
    barrier(); // Q is in registers: the staging block takes keys.
    for (uint t0 = k_begin; t0 < k_end; t0 += KEYS) {
        uint nfrag = min(4u, (k_end - t0 + 15u) / 16u);
        store_block(staged, nfrag);
        barrier();
        // Scores of the block's fragments that hold keys in range.
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            if (j < nfrag) {
                coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> s =
                    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
                [[unroll]] for (uint c = 0u; c < 8u; c++) {
                    if (c < nd) {
                        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> kb;
                        coopMatLoad(kb, kv_s, 16u * j * LD + 4u * c, LD, gl_CooperativeMatrixLayoutColumnMajor);
                        s = coopMatMulAdd(qa[c], kb, s);
                    }
                }
                coopMatStore(s, s_s, sb + 16u * j, SS, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        barrier(); // every subgroup is done with K: V's loads go out during the softmax
        load_block(staged, pt, t0, nfrag, 1u, kv_dim, kvh);
        // Softmax bookkeeping: lanes 2r and 2r + 1 hold row r's keys 0..31 and 32..63, read
        // once into registers (consecutive, so the loads can be 16 bytes wide); keys from
        // `lim` on are past the range or the row's context, keys before `lo` before its window.
        uint end = min(k_end, ctx), lim = end > t0 ? end - t0 : 0u, lo = first > t0 ? first - t0 : 0u;
        float sc[32];
        float bm = -1.0e30;
        [[unroll]] for (uint e = 0u; e < 32u; e++) {
            sc[e] = capped(s_s[sb + row * SS + 32u * half_ + e]);
            if (32u * half_ + e < lim && 32u * half_ + e >= lo) bm = max(bm, sc[e]);
        }
        bm = max(bm, subgroupShuffleXor(bm, 1u));
        float mn = max(m, bm), corr = exp(m - mn), sum = 0.0;
        m = mn;
        [[unroll]] for (uint e = 0u; e < 32u; e += 4u) {
            // Masked keys weigh zero even when every key so far was masked (a split that
            // starts past this row's context).
            vec4 w;
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint key = 32u * half_ + e + i;
                w[i] = key < lim && key >= lo ? exp(sc[e + i] - mn) : 0.0;
            }
            sum += (w.x + w.y) + (w.z + w.w);
            p_s[pb + (row * PS + 32u * half_ + e) / 4u] = f16vec4(w);
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
        store_block(staged, nfrag);
        barrier();
        if (t0 + KEYS < k_end)
            load_block(staged, pt, t0 + KEYS, min(4u, (k_end - t0 - KEYS + 15u) / 16u), 0u, kv_dim, kvh);
        // P · V.
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            if (j < nfrag) {
                coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> pa;
                coopMatLoad(pa, p_s, pb + 4u * j, PS / 4u, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint c = 0u; c < 8u; c++) {
                    if (c < nd) {
                        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> vb;
                        coopMatLoad(vb, kv_s, 16u * j * LD + 4u * c, LD, gl_CooperativeMatrixLayoutRowMajor);
                        o[c] = coopMatMulAdd(pa, vb, o[c]);
                    }
                }
            }
        }
        barrier(); // every subgroup is done with V before the next K is stored
    }
    if (half_ == 0u) {
        row_s[sg][0][row] = m;
        row_s[sg][1][row] = l;
    }
    uint row_width = p.n_head * hd;
    // Outputs, 64 columns at a time through the staging area: normalised rows (and their
    // 8-bit copy), or with key splits this split's maximum, sum and unnormalised sums.
    [[unroll]] for (uint c0 = 0u; c0 < 8u; c0 += 4u) {
        if (c0 < nd) {
            [[unroll]] for (uint c = c0; c < c0 + 4u; c++)
                if (c < nd) coopMatStore(o[c], s_s, sb + 16u * (c - c0), SS, gl_CooperativeMatrixLayoutRowMajor);
            sync();
            uint cols = min(64u, hd - 16u * c0);
            if (live) {
                for (uint i = lane; i < 16u * 64u; i += 32u) {
                    uint r = i / 64u, col = i % 64u, d = 16u * c0 + col;
                    if (r >= n_live || col >= cols) continue;
                    float v = s_s[sb + r * SS + col], mm = row_s[sg][0][r], sum = row_s[sg][1][r];
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
            sync();
        }
    }
}
