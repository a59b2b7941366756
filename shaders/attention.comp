#version 450
// Causal attention of one query row and head over its sequence's KV pages (GQA: query head h
// reads KV head h / group). Flash-style: keys are taken 64 at a time, with a running maximum
// and sum, so the context is read once and its length is unbounded. When `xq` is set, the
// head's output is also quantized to 8 bits for the output projection (head widths that are
// a multiple of 32), which saves that product its own quantize dispatch and barrier.
//
// A decode step's context is short, so the chain of dependent memory reads sets this
// kernel's time, not the bytes: with heads a multiple of 8 wide, a thread reads its key's K
// row as 16-byte words all issued together, and for P · V owns 8 dimensions of a share of the
// tile's keys (16-byte reads of V, all issued together; the shares are summed at the end).
// The reads are issued before the values they wait for: the first tile's K rows before q is
// staged, each tile's V rows as soon as their addresses are known (before the softmax), and
// the next tile's K rows before this tile's P · V. Other head widths take 4-byte reads.
//
// SG_REDUCE (devices with subgroup arithmetic in compute): the tile's largest score and its
// sum of probabilities are subgroup reductions, combined across subgroups in shared memory,
// instead of every thread walking the tile's 64 scores twice.
#ifndef SG_REDUCE
#define SG_REDUCE 0
#endif
#if SG_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"
#include "kv.glsl"
#include "q8.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats q; Words kv; Floats out_; Ints positions; Ints row_pages; Ints page_tables; Words xq; Floats xds;
    Floats partial;
    uint n_head; uint n_head_kv; uint head_dim; uint layer; uint n_layer; uint page_size; float scale;
    // Rows of the step, and whether attention_tiled.comp takes the rows of one-sequence tiles.
    uint n_rows; uint skip_tiled;
    // Key splits (0: none): workgroup z takes one of `splits` equal ranges of the context and
    // writes its running maximum, sum and unnormalised output to `partial` for
    // attention_merge.comp. Decode at long contexts: one workgroup per row and head would
    // walk thousands of keys alone.
    uint splits;
} p;
#include "attention_tiles.glsl"
shared float q_s[256];
shared float score[64];
shared float prob[64];
// Per thread, its 8 dimensions of P · V over its share of the keys (16-byte path).
shared float part[64 * 8];
// Word offset of each tile position's K row for this KV head (its V row is vstride further).
shared uint64_t krow[64];
#if SG_REDUCE
// Each subgroup's largest score and sum of probabilities in the current tile.
shared float sg_max[64];
shared float sg_sum[64];
#endif

// Word offset of key `pos`'s K row for KV head `kvh` (the read of its page-table entry first).
uint64_t key_row(uint pos, uint pt, uint kvh, uint hd, uint kv_dim) {
    uint page = uint(p.page_tables.v[pt + pos / p.page_size]);
    return kv_row_word(page, p.layer, 0u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + kvh * hd / 2u;
}

void main() {
    uint r = gl_WorkGroupID.y, h = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (p.skip_tiled != 0u && tile_is_one_sequence(r / TILE_ROWS)) return;
    uint hd = p.head_dim, kv_dim = p.n_head_kv * hd, kvh = h / (p.n_head / p.n_head_kv);
    uint64_t vstride = uint64_t(p.page_size * kv_dim / 2u);
    uint q_base = r * p.n_head * hd + h * hd;
    uint ctx = uint(p.positions.v[r]) + 1u;
    uvec2 keys = split_key_range(ctx);
    uint k_begin = keys.x, k_end = keys.y;
    uint pt = uint(p.row_pages.v[r]);
    float m = -1.0e30, l = 0.0;
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    // 16-byte path: this thread's chunk of 8 dimensions, its first key and the key stride
    // (64 threads over hd / 8 chunks: 16 keys each at head width 128, 4 at 256 … 64 / lanes).
    bool wide = hd % 8u == 0u;
    uint chunks = max(hd / 8u, 1u); // at least 1: heads narrower than 8 take the 4-byte path
    uint lanes = wide ? 64u / chunks : 1u, chunk = t % chunks, kl = t / chunks;
    uint n4 = hd / 8u;
    float acc8[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    // 16-byte path: the first 16 words (128 dimensions) of this thread's key in the current
    // tile, and its row; the first tile's are read before q is staged.
    uvec4 kw[16];
    uint64_t w = 0ul;
    if (wide && k_begin + t < k_end) {
        w = key_row(k_begin + t, pt, kvh, hd, kv_dim);
        Vec4s k = Vec4s(uint64_t(p.kv) + w * 4ul);
        [[unroll]] for (uint u = 0u; u < 16u; u++) kw[u] = k.v[min(u, n4 - 1u)];
    }
    for (uint d = t; d < hd; d += 64u) q_s[d] = p.q.v[q_base + d];
    barrier();
    for (uint t0 = k_begin; t0 < k_end; t0 += 64u) {
        uint pos = t0 + t;
        float s = -1.0e30;
        if (pos < k_end) {
            float dot_ = 0.0;
            if (wide) {
                Vec4s k = Vec4s(uint64_t(p.kv) + w * 4ul);
                for (uint c0 = 0u; c0 < n4; c0 += 16u) {
                    // Heads wider than 128: the next 16 words, loaded before use.
                    if (c0 > 0u) {
                        [[unroll]] for (uint u = 0u; u < 16u; u++) kw[u] = k.v[min(c0 + u, n4 - 1u)];
                    }
                    [[unroll]] for (uint u = 0u; u < 16u; u++) {
                        if (c0 + u < n4) {
                            uint d = 8u * (c0 + u);
                            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                                vec2 kk = unpackHalf2x16(kw[u][i]);
                                dot_ += q_s[d + 2u * i] * kk.x + q_s[d + 2u * i + 1u] * kk.y;
                            }
                        }
                    }
                }
            } else {
                w = key_row(pos, pt, kvh, hd, kv_dim);
                // Sixteen 4-byte words per iteration, loaded before use.
                Words k = words_at(p.kv, w * 4ul);
                uint words = hd / 2u;
                for (uint d0 = 0u; d0 < words; d0 += 16u) {
                    uint kw4[16];
                    [[unroll]] for (uint u = 0u; u < 16u; u++) kw4[u] = k.v[min(d0 + u, words - 1u)];
                    [[unroll]] for (uint u = 0u; u < 16u; u++) {
                        if (d0 + u < words) {
                            vec2 kk = unpackHalf2x16(kw4[u]);
                            dot_ += q_s[2u * (d0 + u)] * kk.x + q_s[2u * (d0 + u) + 1u] * kk.y;
                        }
                    }
                }
            }
            krow[t] = w;
            s = dot_ * p.scale;
        }
#if SG_REDUCE
        float s_max = subgroupMax(s);
        if (subgroupElect()) sg_max[gl_SubgroupID] = s_max;
#else
        score[t] = s;
#endif
        barrier();
        uint n = min(64u, k_end - t0);
        // 16-byte path: V rows of this thread's first 16 keys of the tile, read now (their
        // addresses are in krow) so that the reads overlap the softmax.
        uvec4 vw[16];
        if (wide) {
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint j = min(kl + lanes * u, n - 1u);
                vw[u] = Vec4s(uint64_t(p.kv) + (krow[j] + vstride) * 4ul).v[chunk];
            }
        }
        // And the next tile's K rows: this tile's are used.
        uint next = t0 + 64u + t;
        if (wide && next < k_end) {
            w = key_row(next, pt, kvh, hd, kv_dim);
            Vec4s k = Vec4s(uint64_t(p.kv) + w * 4ul);
            [[unroll]] for (uint u = 0u; u < 16u; u++) kw[u] = k.v[min(u, n4 - 1u)];
        }
        float tile_max = m;
#if SG_REDUCE
        for (uint i = 0u; i < gl_NumSubgroups; i++) tile_max = max(tile_max, sg_max[i]);
#else
        for (uint j = 0u; j < n; j++) tile_max = max(tile_max, score[j]);
#endif
        float corr = exp(m - tile_max);
        m = tile_max;
        float prob_t = t < n ? exp(s - m) : 0.0;
        prob[t] = prob_t;
#if SG_REDUCE
        float p_sum = subgroupAdd(prob_t);
        if (subgroupElect()) sg_sum[gl_SubgroupID] = p_sum;
#endif
        barrier();
        l *= corr;
#if SG_REDUCE
        for (uint i = 0u; i < gl_NumSubgroups; i++) l += sg_sum[i];
#else
        for (uint j = 0u; j < n; j++) l += prob[j];
#endif
        if (wide) {
            // This thread's 8 dimensions (chunk c) over keys kl, kl + lanes, … of the tile.
            [[unroll]] for (uint i = 0u; i < 8u; i++) acc8[i] *= corr;
            for (uint u0 = 0u; u0 * lanes < n; u0 += 16u) {
                // Past the first 16 keys (heads wider than 64): the next V rows, loaded before use.
                if (u0 > 0u) {
                    [[unroll]] for (uint u = 0u; u < 16u; u++) {
                        uint j = min(kl + lanes * (u0 + u), n - 1u);
                        vw[u] = Vec4s(uint64_t(p.kv) + (krow[j] + vstride) * 4ul).v[chunk];
                    }
                }
                [[unroll]] for (uint u = 0u; u < 16u; u++) {
                    uint j = kl + lanes * (u0 + u);
                    // Threads past the last whole lane (64 not a multiple of hd / 8) add nothing.
                    float pj = j < n && kl < lanes ? prob[min(j, 63u)] : 0.0;
                    [[unroll]] for (uint i = 0u; i < 4u; i++) {
                        vec2 vv = unpackHalf2x16(vw[u][i]);
                        acc8[2u * i] += pj * vv.x;
                        acc8[2u * i + 1u] += pj * vv.y;
                    }
                }
            }
        } else for (uint k = 0u; k < 4u; k++) {
            acc[k] *= corr;
            uint d = t + 64u * k;
            if (d >= hd) break;
            float a = acc[k];
            // Sixteen positions per iteration, loaded before use.
            for (uint j0 = 0u; j0 < n; j0 += 16u) {
                uint vw4[16];
                [[unroll]] for (uint u = 0u; u < 16u; u++) {
                    vw4[u] = words_at(p.kv, (krow[min(j0 + u, n - 1u)] + vstride) * 4ul).v[d >> 1];
                }
                [[unroll]] for (uint u = 0u; u < 16u; u++) {
                    if (j0 + u < n) {
                        vec2 vv = unpackHalf2x16(vw4[u]);
                        a += prob[j0 + u] * ((d & 1u) == 0u ? vv.x : vv.y);
                    }
                }
            }
            acc[k] = a;
        }
        barrier();
    }
    if (wide) {
        // Sum the key shares: dimension d of chunk d / 8 from every lane.
        [[unroll]] for (uint i = 0u; i < 8u; i++) part[8u * t + i] = acc8[i];
        barrier();
        for (uint k = 0u; k < 4u; k++) {
            uint d = t + 64u * k;
            if (d >= hd) break;
            float a = 0.0;
            for (uint j = 0u; j < lanes; j++) a += part[8u * (j * (hd / 8u) + d / 8u) + d % 8u];
            acc[k] = a;
        }
        barrier();
    }
    if (p.splits != 0u) {
        // An empty range writes (-1e30, 0, zeros): the merge gives it no weight.
        uint at = ((r * p.n_head + h) * p.splits + gl_WorkGroupID.z) * (hd + 2u);
        if (t == 0u) {
            p.partial.v[at] = m;
            p.partial.v[at + 1u] = l;
        }
        for (uint k = 0u; k < 4u; k++) {
            uint d = t + 64u * k;
            if (d < hd) p.partial.v[at + 2u + d] = acc[k];
        }
        return;
    }
    // The last tile ended with a barrier: q_s is free to hold the output.
    for (uint k = 0u; k < 4u; k++) {
        uint d = t + 64u * k;
        if (d < hd) {
            float o = acc[k] / l;
            p.out_.v[q_base + d] = o;
            q_s[d] = o;
        }
    }
    if (uint64_t(p.xq) == 0ul) return;
    barrier();
    if (t < hd / 32u) {
        float blk[32];
        for (uint j = 0u; j < 32u; j++) blk[j] = q_s[32u * t + j];
        store_q8_block(blk, p.xq, p.xds, q_base / 32u + t);
    }
}
