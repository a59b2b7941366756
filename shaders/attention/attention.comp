#version 450
// Causal attention of one query row and head over its sequence's KV pages (GQA: query head h
// reads KV head h / group), or over the last `window` of them (sliding-window layers). Flash-style: keys are taken NT (128) at a time, one per
// invocation, with a running maximum and sum, so the context is read once and its length is
// unbounded. Each tile is a round of dependent reads (page table, K, V) and barriers, so a
// decode row's time grows with its tiles: 128 keys measured faster than 64 and no slower
// than 256 (docs/measurements/vulkan-h200-session16-2026-12-04/). When `xq` is set, the
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
// instead of every thread walking the tile's scores twice.
//
// PRELUDE (decode steps whose rows each belong to a different sequence): `q`, `k_in` and
// `v_in` are the Q/K/V products as they left them, and each workgroup does for its own head
// what rope_kv_store.comp would have done in a dispatch of its own: qwen3's head norms, RoPE
// on its query head and on its KV head's new key, and the f16 rounding of that key and value.
// The row's own key (its last) is then taken from workgroup memory rather than its KV page,
// and the first query head of each KV head (key split 0) stores the new K and V rows in their
// page for later steps. The work is a few hundred arithmetic operations beside the chain of
// page-table and key reads the workgroup waits on anyway; the layer loses a dispatch and the
// barrier after it. Rows of one sequence in one step read each other's new keys, so they keep
// the separate dispatch.
#ifndef SG_REDUCE
#define SG_REDUCE 0
#endif
#ifndef PRELUDE
#define PRELUDE 0
#endif
#if SG_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common/common.glsl"
#include "common/kv.glsl"
// Invocations per workgroup, and keys per tile.
#define NT 128u
#define Q8_BY_WORDS NT
#include "common/q8.glsl"
#if PRELUDE
#include "common/rope.glsl"
#include "attention/head_prelude.glsl"
#endif
layout(local_size_x = NT) in;
// The kernel's arguments, as `p`: the push-constant block itself, or (PRELUDE) a struct of the
// same fields that main() fills from the packed push constants below.
#if PRELUDE
#define ARGS_STRUCT struct Args
#else
#define ARGS_STRUCT layout(push_constant) uniform P
#endif
ARGS_STRUCT {
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
    // Keys a query reads up to its own (sliding-window layers), 0 for all.
    uint window;
    // Soft cap on scaled scores (Gemma 2), 0 for none; never with the prelude, whose packed
    // arguments have no room for it.
    float softcap;
#if PRELUDE
    // The step's K and V products (q holds its Q product), RoPE's frequencies, and the Q and K
    // head-norm weights (0: no head norms).
    Floats k_in; Floats v_in; Floats inv_freq; Floats q_norm; Floats k_norm;
    uint half_rot; uint neox; float eps;
#endif
}
#if PRELUDE
;
// With the prelude's fields the arguments pass the 128 bytes of push constants every device
// offers, so they arrive packed (record/attention.rs `prelude_push`): the paging inputs as
// one address and two word offsets, xq and partial in one field (a split step writes only
// partial), and the small counts two to a word. main() unpacks them into `p` first.
layout(push_constant) uniform Packed {
    Floats q; Words kv; Floats out_; Ints positions; uint64_t xq_or_partial; Floats xds;
    Floats k_in; Floats v_in; Floats inv_freq; Floats q_norm; Floats k_norm;
    uint row_pages_at; uint page_tables_at;
    uint heads; uint dims; uint layers; // n_head | n_head_kv << 16, head_dim | half_rot << 16, layer | n_layer << 16
    uint page_size; float scale; uint splits;
    uint neox_window; // RoPE's pairing (neox) in bit 0, the window above it
    float eps;
} packed;
Args p;

void unpack_args() {
    p.q = packed.q;
    p.kv = packed.kv;
    p.out_ = packed.out_;
    p.positions = packed.positions;
    p.row_pages = Ints(uint64_t(packed.positions) + uint64_t(packed.row_pages_at) * 4ul);
    p.page_tables = Ints(uint64_t(packed.positions) + uint64_t(packed.page_tables_at) * 4ul);
    p.xq = Words(packed.xq_or_partial);
    p.xds = packed.xds;
    p.partial = Floats(packed.xq_or_partial);
    p.n_head = packed.heads & 0xffffu;
    p.n_head_kv = packed.heads >> 16;
    p.head_dim = packed.dims & 0xffffu;
    p.layer = packed.layers & 0xffffu;
    p.n_layer = packed.layers >> 16;
    p.page_size = packed.page_size;
    p.scale = packed.scale;
    p.n_rows = 0u;
    p.skip_tiled = 0u;
    p.softcap = 0.0;
    p.splits = packed.splits;
    p.k_in = packed.k_in;
    p.v_in = packed.v_in;
    p.inv_freq = packed.inv_freq;
    p.q_norm = packed.q_norm;
    p.k_norm = packed.k_norm;
    p.half_rot = packed.dims >> 16;
    p.neox = packed.neox_window & 1u;
    p.window = packed.neox_window >> 1;
    p.eps = packed.eps;
}
#else
p;
#endif
#include "attention/attention_tiles.glsl"
// The query head (then the output), four dimensions per element so that the key dot products
// take a 16-byte shared-memory read per four dimensions; Q_AT(d) is dimension d.
shared vec4 q_s[64];
#define Q_AT(d) q_s[(d) >> 2][(d) & 3u]
shared float score[NT];
shared float prob[NT];
// Per thread, its 8 dimensions of P · V over its share of the keys (16-byte path).
shared float part[NT * 8u];
// Word offset of each tile position's K row for this KV head (its V row is vstride further).
shared uint64_t krow[NT];
#if SG_REDUCE
// Each subgroup's largest score and sum of probabilities in the current tile.
shared float sg_max[64];
shared float sg_sum[64];
#endif

// The row's own key (PRELUDE): its position, and its K and V rows as f16 pairs, as its KV
// page will hold them. No position matches when the variant is off.
uint cur_key = 0xffffffffu;
#if PRELUDE
shared uint k_cur[128];
shared uint v_cur[128];
shared float k_s[256];
shared vec2 sq_part[NT];

// The workgroup's sum of every thread's (Q, K) squares.
vec2 workgroup_sum2(vec2 v) {
    uint t = gl_LocalInvocationID.x;
#if SG_REDUCE
    vec2 s = subgroupAdd(v);
    if (subgroupElect()) sq_part[gl_SubgroupID] = s;
    barrier();
    vec2 total = vec2(0.0);
    for (uint i = 0u; i < gl_NumSubgroups; i++) total += sq_part[i];
    return total;
#else
    sq_part[t] = v;
    barrier();
    for (uint n = NT / 2u; n > 0u; n >>= 1) {
        if (t < n) sq_part[t] += sq_part[t + n];
        barrier();
    }
    return sq_part[0];
#endif
}

// Query head h of row r normed and rotated into q_s, and KV head kvh's new key (normed,
// rotated) and value as f16 pairs into k_cur and v_cur, for position `pos`. Every read is
// issued before the first use; the caller's barrier publishes q_s, k_cur and v_cur.
void head_prelude(uint r, uint h, uint kvh, uint hd, uint kv_dim, uint pos) {
    uint t = gl_LocalInvocationID.x;
    uint qb = r * p.n_head * hd + h * hd, kb = r * kv_dim + kvh * hd;
    bool normed = uint64_t(p.q_norm) != 0ul;
    float qv[4], kv_[4], gq[4], gk[4];
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint d = min(t + NT * j, hd - 1u);
        qv[j] = p.q.v[qb + d];
        kv_[j] = p.k_in.v[kb + d];
        gq[j] = normed ? p.q_norm.v[d] : 1.0;
        gk[j] = normed ? p.k_norm.v[d] : 1.0;
    }
    vec2 vv[2];
    float freq[2];
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uint w = min(t + NT * j, hd / 2u - 1u);
        vv[j] = vec2(p.v_in.v[kb + 2u * w], p.v_in.v[kb + 2u * w + 1u]);
        freq[j] = p.inv_freq.v[min(t + NT * j, max(p.half_rot, 1u) - 1u)];
    }
    // The rotation angles wait only on the frequencies: computed while Q and K arrive.
    vec2 cs[2];
    [[unroll]] for (uint j = 0u; j < 2u; j++) cs[j] = rope_cos_sin(float(pos), freq[j]);
    if (normed) {
        vec2 s = vec2(0.0);
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            precise float sq = qv[j] * qv[j];
            precise float sk = kv_[j] * kv_[j];
            s += t + NT * j < hd ? vec2(sq, sk) : vec2(0.0);
        }
        vec2 total = workgroup_sum2(s);
        float scale_q = head_rms_scale(total.x, hd, p.eps), scale_k = head_rms_scale(total.y, hd, p.eps);
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            precise float yq = qv[j] * scale_q * gq[j];
            precise float yk = kv_[j] * scale_k * gk[j];
            qv[j] = yq;
            kv_[j] = yk;
        }
    }
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint d = t + NT * j;
        if (d < hd) {
            Q_AT(d) = qv[j];
            k_s[d] = kv_[j];
        }
    }
    barrier();
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uint i = t + NT * j;
        if (i < p.half_rot) {
            uvec2 ab = rope_pair(i, p.half_rot, p.neox != 0u);
            vec2 yq = rope_rotate(vec2(Q_AT(ab.x), Q_AT(ab.y)), cs[j]);
            vec2 yk = rope_rotate(vec2(k_s[ab.x], k_s[ab.y]), cs[j]);
            Q_AT(ab.x) = yq.x;
            Q_AT(ab.y) = yq.y;
            k_s[ab.x] = yk.x;
            k_s[ab.y] = yk.y;
        }
    }
    barrier();
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uint w = t + NT * j;
        if (w < hd / 2u) {
            k_cur[w] = packHalf2x16(vec2(k_s[2u * w], k_s[2u * w + 1u]));
            v_cur[w] = packHalf2x16(vv[j]);
        }
    }
}
#endif

// 16-byte word i of key `key`'s K row (at word offset w): the row's own key from workgroup
// memory (PRELUDE), any other from its KV page.
uvec4 key_words(uint key, uint64_t w, uint i) {
#if PRELUDE
    if (key == cur_key) return uvec4(k_cur[4u * i], k_cur[4u * i + 1u], k_cur[4u * i + 2u], k_cur[4u * i + 3u]);
#endif
    return Vec4s(uint64_t(p.kv) + w * 4ul).v[i];
}

// The same for 16-byte word i of a V row whose K row starts at word w (V is vstride further).
uvec4 value_words(uint key, uint64_t w, uint64_t vstride, uint i) {
#if PRELUDE
    if (key == cur_key) return uvec4(v_cur[4u * i], v_cur[4u * i + 1u], v_cur[4u * i + 2u], v_cur[4u * i + 3u]);
#endif
    return Vec4s(uint64_t(p.kv) + (w + vstride) * 4ul).v[i];
}

// 4-byte word i of a K (which = 0) or V (which = 1) row, as key_words and value_words.
uint row_word(uint key, uint64_t w, uint which, uint i) {
#if PRELUDE
    if (key == cur_key) return which == 0u ? k_cur[i] : v_cur[i];
#endif
    return words_at(p.kv, w * 4ul).v[i];
}

// Word offset of key `pos`'s K row for KV head `kvh` (the read of its page-table entry first).
uint64_t key_row(uint pos, uint pt, uint kvh, uint hd, uint kv_dim) {
    uint page = uint(p.page_tables.v[pt + pos / p.page_size]);
    return kv_row_word(page, p.layer, 0u, pos % p.page_size, p.n_layer, p.page_size, kv_dim) + kvh * hd / 2u;
}

void main() {
#if PRELUDE
    unpack_args();
#endif
    uint r = gl_WorkGroupID.y, h = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (p.skip_tiled != 0u && tile_is_one_sequence(r / TILE_ROWS)) return;
    uint hd = p.head_dim, kv_dim = p.n_head_kv * hd, kvh = h / (p.n_head / p.n_head_kv);
    uint64_t vstride = uint64_t(p.page_size * kv_dim / 2u);
    uint q_base = r * p.n_head * hd + h * hd;
    uint ctx = uint(p.positions.v[r]) + 1u;
    uvec2 keys = split_key_range(window_first(ctx), ctx);
    uint k_begin = keys.x, k_end = keys.y;
    uint pt = uint(p.row_pages.v[r]);
#if PRELUDE
    cur_key = ctx - 1u;
    // Split 0 of the first query head of each KV head stores the new K and V rows.
    bool stores_kv = h % (p.n_head / p.n_head_kv) == 0u && gl_WorkGroupID.z == 0u;
    uint cur_page = stores_kv ? uint(p.page_tables.v[pt + cur_key / p.page_size]) : 0u;
#endif
    float m = -1.0e30, l = 0.0;
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    // 16-byte path: this thread's chunk of 8 dimensions, its first key and the key stride
    // (NT threads over hd / 8 chunks: 16 keys each at head width 128 … NT / lanes).
    bool wide = hd % 8u == 0u;
    uint chunks = max(hd / 8u, 1u); // at least 1: heads narrower than 8 take the 4-byte path
    uint lanes = wide ? NT / chunks : 1u, chunk = t % chunks, kl = t / chunks;
    uint n4 = hd / 8u;
    float acc8[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    // 16-byte path: the first 16 words (128 dimensions) of this thread's key in the current
    // tile, and its row; the first tile's are read before q is staged.
    uvec4 kw[16];
    uint64_t w = 0ul;
    // (The row's own key, under PRELUDE, is not in its page yet: it is taken later.)
    if (wide && k_begin + t < k_end && k_begin + t != cur_key) {
        w = key_row(k_begin + t, pt, kvh, hd, kv_dim);
        Vec4s k = Vec4s(uint64_t(p.kv) + w * 4ul);
        [[unroll]] for (uint u = 0u; u < 16u; u++) kw[u] = k.v[min(u, n4 - 1u)];
    }
#if PRELUDE
    head_prelude(r, h, kvh, hd, kv_dim, cur_key);
#else
    for (uint d = t; d < hd; d += NT) Q_AT(d) = p.q.v[q_base + d];
#endif
    barrier();
#if PRELUDE
    if (stores_kv) {
        uint slot = cur_key % p.page_size;
        uint64_t kr = kv_row_word(cur_page, p.layer, 0u, slot, p.n_layer, p.page_size, kv_dim) + kvh * hd / 2u;
        uint64_t vr = kv_row_word(cur_page, p.layer, 1u, slot, p.n_layer, p.page_size, kv_dim) + kvh * hd / 2u;
        Words kd = words_at(p.kv, kr * 4ul), vd = words_at(p.kv, vr * 4ul);
        for (uint i = t; i < hd / 2u; i += NT) {
            kd.v[i] = k_cur[i];
            vd.v[i] = v_cur[i];
        }
    }
#endif
    for (uint t0 = k_begin; t0 < k_end; t0 += NT) {
        uint pos = t0 + t;
        float s = -1.0e30;
        if (pos < k_end) {
            float dot_ = 0.0;
            if (wide) {
                if (pos == cur_key) {
                    [[unroll]] for (uint u = 0u; u < 16u; u++) kw[u] = key_words(pos, w, min(u, n4 - 1u));
                }
                for (uint c0 = 0u; c0 < n4; c0 += 16u) {
                    // Heads wider than 128: the next 16 words, loaded before use.
                    if (c0 > 0u) {
                        [[unroll]] for (uint u = 0u; u < 16u; u++) kw[u] = key_words(pos, w, min(c0 + u, n4 - 1u));
                    }
                    // Four running sums (one per word of the 16): four short chains of
                    // dependent adds rather than one long one.
                    vec4 sums = vec4(0.0);
                    [[unroll]] for (uint u = 0u; u < 16u; u++) {
                        if (c0 + u < n4) {
                            vec4 qa = q_s[2u * (c0 + u)], qb = q_s[2u * (c0 + u) + 1u];
                            vec2 k0 = unpackHalf2x16(kw[u].x), k1 = unpackHalf2x16(kw[u].y);
                            vec2 k2 = unpackHalf2x16(kw[u].z), k3 = unpackHalf2x16(kw[u].w);
                            sums += vec4(qa.x * k0.x + qa.y * k0.y, qa.z * k1.x + qa.w * k1.y,
                                         qb.x * k2.x + qb.y * k2.y, qb.z * k3.x + qb.w * k3.y);
                        }
                    }
                    dot_ += (sums.x + sums.y) + (sums.z + sums.w);
                }
            } else {
                w = key_row(pos, pt, kvh, hd, kv_dim);
                // Sixteen 4-byte words per iteration, loaded before use.
                uint words = hd / 2u;
                for (uint d0 = 0u; d0 < words; d0 += 16u) {
                    uint kw4[16];
                    [[unroll]] for (uint u = 0u; u < 16u; u++) kw4[u] = row_word(pos, w, 0u, min(d0 + u, words - 1u));
                    [[unroll]] for (uint u = 0u; u < 16u; u++) {
                        if (d0 + u < words) {
                            vec2 kk = unpackHalf2x16(kw4[u]);
                            dot_ += Q_AT(2u * (d0 + u)) * kk.x + Q_AT(2u * (d0 + u) + 1u) * kk.y;
                        }
                    }
                }
            }
            krow[t] = w;
            s = capped(dot_ * p.scale);
        }
#if SG_REDUCE
        float s_max = subgroupMax(s);
        if (subgroupElect()) sg_max[gl_SubgroupID] = s_max;
#else
        score[t] = s;
#endif
        barrier();
        uint n = min(NT, k_end - t0);
        // 16-byte path: V rows of this thread's first 16 keys of the tile, read now (their
        // addresses are in krow) so that the reads overlap the softmax.
        uvec4 vw[16];
        if (wide) {
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint j = min(kl + lanes * u, n - 1u);
                vw[u] = value_words(t0 + j, krow[j], vstride, chunk);
            }
        }
        // And the next tile's K rows: this tile's are used.
        uint next = t0 + NT + t;
        if (wide && next < k_end && next != cur_key) {
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
                // Past the first 16 keys of a lane (heads wider than 128): the next V rows, loaded
                // before use.
                if (u0 > 0u) {
                    [[unroll]] for (uint u = 0u; u < 16u; u++) {
                        uint j = min(kl + lanes * (u0 + u), n - 1u);
                        vw[u] = value_words(t0 + j, krow[j], vstride, chunk);
                    }
                }
                [[unroll]] for (uint u = 0u; u < 16u; u++) {
                    uint j = kl + lanes * (u0 + u);
                    // Threads past the last whole lane (NT not a multiple of hd / 8) add nothing.
                    float pj = j < n && kl < lanes ? prob[min(j, NT - 1u)] : 0.0;
                    [[unroll]] for (uint i = 0u; i < 4u; i++) {
                        vec2 vv = unpackHalf2x16(vw[u][i]);
                        acc8[2u * i] += pj * vv.x;
                        acc8[2u * i + 1u] += pj * vv.y;
                    }
                }
            }
        } else for (uint k = 0u; k < 4u; k++) {
            acc[k] *= corr;
            uint d = t + NT * k;
            if (d >= hd) break;
            float a = acc[k];
            // Sixteen positions per iteration, loaded before use.
            for (uint j0 = 0u; j0 < n; j0 += 16u) {
                uint vw4[16];
                [[unroll]] for (uint u = 0u; u < 16u; u++) {
                    uint j = min(j0 + u, n - 1u);
                    vw4[u] = row_word(t0 + j, krow[j] + vstride, 1u, d >> 1);
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
            uint d = t + NT * k;
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
            uint d = t + NT * k;
            if (d < hd) p.partial.v[at + 2u + d] = acc[k];
        }
        return;
    }
    // The last tile ended with a barrier: q_s is free to hold the output.
    for (uint k = 0u; k < 4u; k++) {
        uint d = t + NT * k;
        if (d < hd) {
            float o = acc[k] / l;
            p.out_.v[q_base + d] = o;
            Q_AT(d) = o;
        }
    }
    if (uint64_t(p.xq) == 0ul) return;
    // Word t of the head's output (whose blocks are whole: hd is a multiple of 32 here), once
    // every invocation has staged its dimensions.
    barrier();
    store_q8_words(q_s[min(t, 63u)], t < hd / 4u, q_base / 4u + t, p.xq, p.xds);
}
