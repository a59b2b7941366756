#version 450
// Prompt-chunk attention: one workgroup per head and tile of TILE_ROWS consecutive query rows
// that belong to one sequence (the host also dispatches attention.comp, which takes the rows
// of every other tile). Each tile of 64 keys and their values is staged in shared memory once
// and serves every row of the tile: the one-row kernel streams a sequence's whole context
// once per row and head. Scores are a 16 × 64 block per key tile, four rows by four keys
// per thread; softmax is flash-style (running maximum and sum per row), so the context
// length is unbounded. Heads of up to 128 values. When `xq` is set, each row's head output
// is also quantized to 8 bits for the output projection, as attention.comp does.
#include "common/common.glsl"
#include "common/kv.glsl"
#include "common/q8.glsl"
layout(local_size_x = 64) in;
#define KEYS 64u
// Padded row strides (in 32-bit words) so that threads reading different rows of the staged
// tiles hit different shared-memory banks.
#define Q_STRIDE 129u
#define KV_STRIDE 65u
layout(push_constant) uniform P {
    Floats q; Words kv; Floats out_; Ints positions; Ints row_pages; Ints page_tables; Words xq; Floats xds;
    Floats partial;
    uint n_head; uint n_head_kv; uint head_dim; uint layer; uint n_layer; uint page_size; float scale;
    uint n_rows; uint skip_tiled; // attention.comp's push constants; skip_tiled unused here
    // Key splits (0: none), as in attention.comp: workgroup z takes one of `splits` equal
    // ranges of the tile's context and writes each row's running maximum, sum and
    // unnormalised output to `partial` for attention_merge.comp. A chunk of few tiles deep in
    // a long prompt would otherwise walk thousands of keys in a handful of workgroups.
    uint splits;
    // Keys a query reads up to its own (sliding-window layers), 0 for all.
    uint window;
    float softcap;
} p;
#include "attention/attention_tiles.glsl"
shared float q_s[TILE_ROWS * Q_STRIDE];
shared uint kv_s[KEYS * KV_STRIDE];
shared float p_s[TILE_ROWS][KEYS];
shared float red_s[TILE_ROWS][16];
shared uint64_t krow_s[KEYS];
shared uint max_ctx_s;
shared uint min_first_s;

void main() {
    uint h = gl_WorkGroupID.x, tile = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    if (!tile_is_one_sequence(tile)) return;
    uint hd = p.head_dim, words = hd / 2u, kv_dim = p.n_head_kv * hd, kvh = h / (p.n_head / p.n_head_kv);
    uint r0 = tile * TILE_ROWS, n_live = min(TILE_ROWS, p.n_rows - r0);
    uint pt = uint(p.row_pages.v[r0]);
    uint64_t vstride = uint64_t(p.page_size * kv_dim / 2u);
    // Rows of this thread in both phases: 4·tr .. 4·tr+3; its keys tc + 16·i, its value words
    // tc + 16·i.
    uint tr = t / 16u, tc = t % 16u;
    for (uint i = t; i < TILE_ROWS * hd; i += 64u) {
        uint row = i / hd, d = i % hd;
        q_s[row * Q_STRIDE + d] = row < n_live ? p.q.v[(r0 + row) * p.n_head * hd + h * hd + d] : 0.0;
    }
    if (t == 0u) {
        uint c = 0u, f = 0xffffffffu;
        for (uint row = 0u; row < n_live; row++) {
            uint rc = uint(p.positions.v[r0 + row]) + 1u;
            c = max(c, rc);
            f = min(f, window_first(rc));
        }
        max_ctx_s = c;
        min_first_s = f;
    }
    // Each row's keys: [first, ctx).
    uint ctx[4], first[4];
    [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
        uint row = 4u * tr + rr;
        ctx[rr] = row < n_live ? uint(p.positions.v[r0 + row]) + 1u : 0u;
        first[rr] = window_first(ctx[rr]);
    }
    float m[4], l[4], acc[4][8];
    [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
        m[rr] = -1.0e30;
        l[rr] = 0.0;
        [[unroll]] for (uint k = 0u; k < 8u; k++) acc[rr][k] = 0.0;
    }
    barrier();
    // Key tiles from a multiple of 64 (rows' keys before their first are masked).
    uvec2 keys = split_key_range(min_first_s / KEYS * KEYS, max_ctx_s);
    uint k_begin = keys.x, k_end = keys.y;
    for (uint t0 = k_begin; t0 < k_end; t0 += KEYS) {
        uint n = min(KEYS, k_end - t0);
        if (t < n) {
            uint pos = t0 + t;
            uint page = uint(p.page_tables.v[pt + pos / p.page_size]);
            krow_s[t] = kv_row_word(page, p.layer, 0u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + kvh * hd / 2u;
        }
        barrier();
        // The key tile: each key's words are consecutive in memory, so consecutive threads
        // read consecutive words; sixteen loads in flight per thread.
        for (uint i0 = t; i0 < n * words; i0 += 16u * 64u) {
            uint w[16];
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint i = min(i0 + 64u * u, n * words - 1u);
                w[u] = words_at(p.kv, krow_s[i / words] * 4ul).v[i % words];
            }
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint i = i0 + 64u * u;
                if (i < n * words) kv_s[(i / words) * KV_STRIDE + i % words] = w[u];
            }
        }
        barrier();
        float s[4][4];
        [[unroll]] for (uint rr = 0u; rr < 4u; rr++) [[unroll]] for (uint i = 0u; i < 4u; i++) s[rr][i] = 0.0;
        for (uint wd = 0u; wd < words; wd++) {
            vec2 kk[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) kk[i] = unpackHalf2x16(kv_s[(tc + 16u * i) * KV_STRIDE + wd]);
            [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
                float q0 = q_s[(4u * tr + rr) * Q_STRIDE + 2u * wd], q1 = q_s[(4u * tr + rr) * Q_STRIDE + 2u * wd + 1u];
                [[unroll]] for (uint i = 0u; i < 4u; i++) s[rr][i] += q0 * kk[i].x + q1 * kk[i].y;
            }
        }
        // Causal mask and this thread's part of each row's maximum.
        [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
            float mx = -1.0e30;
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint pos = t0 + tc + 16u * i;
                s[rr][i] = pos >= first[rr] && pos < ctx[rr] ? capped(s[rr][i] * p.scale) : -1.0e30;
                mx = max(mx, s[rr][i]);
            }
            red_s[4u * tr + rr][tc] = mx;
        }
        barrier();
        // The value tile replaces the key tile (every score is computed): its loads are in
        // flight while the softmax bookkeeping runs.
        for (uint i0 = t; i0 < n * words; i0 += 16u * 64u) {
            uint w[16];
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint i = min(i0 + 64u * u, n * words - 1u);
                w[u] = words_at(p.kv, (krow_s[i / words] + vstride) * 4ul).v[i % words];
            }
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint i = i0 + 64u * u;
                if (i < n * words) kv_s[(i / words) * KV_STRIDE + i % words] = w[u];
            }
        }
        float corr[4];
        [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
            float mx = m[rr];
            for (uint j = 0u; j < 16u; j++) mx = max(mx, red_s[4u * tr + rr][j]);
            corr[rr] = exp(m[rr] - mx);
            m[rr] = mx;
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint key = tc + 16u * i;
                // Masked keys count zero even when every key so far was masked (a split
                // that starts past this row's context).
                float e = key < n && t0 + key >= first[rr] && t0 + key < ctx[rr] ? exp(s[rr][i] - mx) : 0.0;
                p_s[4u * tr + rr][key] = e;
            }
        }
        barrier();
        [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
            float sum = 0.0;
            for (uint j = 0u; j < n; j++) sum += p_s[4u * tr + rr][j];
            l[rr] = l[rr] * corr[rr] + sum;
            [[unroll]] for (uint k = 0u; k < 8u; k++) acc[rr][k] *= corr[rr];
        }
        for (uint j = 0u; j < n; j++) {
            vec2 vv[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint wd = tc + 16u * i;
                vv[i] = wd < words ? unpackHalf2x16(kv_s[j * KV_STRIDE + wd]) : vec2(0.0);
            }
            [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
                float pj = p_s[4u * tr + rr][j];
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    acc[rr][2u * i] += pj * vv[i].x;
                    acc[rr][2u * i + 1u] += pj * vv[i].y;
                }
            }
        }
        barrier();
    }
    if (p.splits != 0u) {
        // A row none of whose keys fell in this range writes (-1e30, 0, zeros): no weight.
        [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
            uint row = 4u * tr + rr;
            if (row >= n_live) continue;
            uint at = (((r0 + row) * p.n_head + h) * p.splits + gl_WorkGroupID.z) * (hd + 2u);
            if (tc == 0u) {
                p.partial.v[at] = m[rr];
                p.partial.v[at + 1u] = l[rr];
            }
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint wd = tc + 16u * i;
                if (wd < words) {
                    p.partial.v[at + 2u + 2u * wd] = acc[rr][2u * i];
                    p.partial.v[at + 3u + 2u * wd] = acc[rr][2u * i + 1u];
                }
            }
        }
        return;
    }
    // Outputs; q_s (no longer read) holds them for the 8-bit copy.
    [[unroll]] for (uint rr = 0u; rr < 4u; rr++) {
        uint row = 4u * tr + rr;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint wd = tc + 16u * i;
            if (row < n_live && wd < words) {
                vec2 o = vec2(acc[rr][2u * i], acc[rr][2u * i + 1u]) / l[rr];
                uint at = (r0 + row) * p.n_head * hd + h * hd + 2u * wd;
                p.out_.v[at] = o.x;
                p.out_.v[at + 1u] = o.y;
                q_s[row * Q_STRIDE + 2u * wd] = o.x;
                q_s[row * Q_STRIDE + 2u * wd + 1u] = o.y;
            }
        }
    }
    if (uint64_t(p.xq) == 0ul) return;
    barrier();
    uint blocks = hd / 32u;
    for (uint b = t; b < n_live * blocks; b += 64u) {
        uint row = b / blocks, c = b % blocks;
        float blk[32];
        for (uint j = 0u; j < 32u; j++) blk[j] = q_s[row * Q_STRIDE + 32u * c + j];
        store_q8_block(blk, p.xq, p.xds, ((r0 + row) * p.n_head * hd + h * hd) / 32u + c);
    }
}
