#version 450
// Expert products at decode of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against
// 8-bit activation rows, one workgroup row per slot (or per token for COMBINE), in three
// variants: SWIGLU, the experts' gate and up with SwiGLU and its 8-bit copy as the epilogue;
// COMBINE, the down products with the router-weighted sum of a token's slots; and the plain
// one, mode 1 (gate/up, input row slot / n_used) or mode 2 (down, input row slot) with
// products side by side (matmul_push.glsl), which gate and up of different types take.
//
// Each subgroup computes FPS consecutive output features, whatever its width: a lane takes
// blocks lane, lane + width, …; for each it reads the activation block once and the FPS
// weight blocks of that column, all issued before the first multiply, and a subgroup sum ends
// each feature. Expert rows are short (Qwen3-30B-A3B's down product: 768 = 24 blocks), so the
// row kernel (matmul_q8.comp), one feature per 32 threads, left lanes idle and spent most of
// its time on each feature's setup and sum; here those are shared by FPS features. Plain
// decode products stay on the row kernel: fewer subgroups in flight made them slower.
// Subgroups loop over feature groups a grid apart, so the host caps the grid. Needs subgroup
// arithmetic only (any subgroup width that divides 64), so lavapipe runs the same code as a
// GPU.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#ifndef FPS
#define FPS 4u
#endif
#ifndef COMBINE
#define COMBINE 0
#endif
#ifndef SWIGLU
#define SWIGLU 0
#endif
#include "common/common.glsl"
#if SWIGLU
layout(local_size_x = 512) in;
#include "common/q8.glsl"
#else
layout(local_size_x = 64) in;
#endif
#include "matmul/matmul_push.glsl"
#include "blocks/qblock.glsl"
#include "blocks/q8_dot.glsl"

// A weight row: its matrix and byte offset.
struct RowRef { Words w; uint rb; };

// Adds to acc[i] this lane's share of weight row rows[i] · activation row xr: the lane takes
// blocks lane, lane + width, …, two columns at a time, reading each activation block once and
// the FPS weight blocks of both columns, all issued before the first multiply (a row of 64
// blocks, the 30B-A3B's gate and up, is then one round of reads per lane on 32-wide
// subgroups, not two). Branch-free: a second column past the end reads the last block and
// counts zero.
void dot_rows(inout float acc[FPS], RowRef rows[FPS], uint xr) {
    uint nb = p.k / 32u, width = gl_SubgroupSize;
    Vec4s xq = Vec4s(uint64_t(p.xq));
    Vec2s xds = Vec2s(uint64_t(p.x));
    for (uint b = gl_SubgroupInvocationID; b < nb; b += 2u * width) {
        uint bs[2] = uint[2](b, min(b + width, nb - 1u));
        float keep = b + width < nb ? 1.0 : 0.0;
        uvec4 xa[2], xb[2];
        vec2 ds[2];
        RawBlock raw[2][FPS];
        [[unroll]] for (uint c = 0u; c < 2u; c++) {
            uint xv = xr * (p.k / 16u) + 2u * bs[c];
            xa[c] = xq.v[xv];
            xb[c] = xq.v[xv + 1u];
            ds[c] = xds.v[xr * nb + bs[c]];
            [[unroll]] for (uint i = 0u; i < FPS; i++) raw[c][i] = load_raw(rows[i].w, rows[i].rb, bs[c]);
        }
        [[unroll]] for (uint i = 0u; i < FPS; i++) {
            acc[i] += block_dot(unpack_block(raw[0][i]), xa[0], xb[0], ds[0]);
            acc[i] += keep * block_dot(unpack_block(raw[1][i]), xa[1], xb[1], ds[1]);
        }
    }
}

#if SWIGLU
// The router's top-k of row r (topk.glsl's rule: softmax over the n_expert logits, the
// n_used largest), done by every workgroup of the row before its products: a decode step's
// top-k is one short workgroup, and as a dispatch of its own (moe_route.comp) it cost a
// dispatch after a barrier and the expert kernel's wait for its ids. Returns the id of rank
// `rank` in ascending order; the row's first workgroup (`publish`) writes all ids and weights
// for the down products. The softmax's maximum and sum are subgroup reductions met in shared
// memory.
// One per subgroup: up to 512 (the workgroup's width, for any subgroup width).
shared float route_red[512];
shared uint route_id[64];
#include "common/topk.glsl"
uint route_row(uint r, uint rank, bool publish) {
    uint t = gl_LocalInvocationID.x, n = p.n_expert;
    // Only the subgroups that hold an expert have a maximum or sum to give (the others' are
    // -1e30 and 0).
    uint parts = (n + gl_SubgroupSize - 1u) / gl_SubgroupSize;
    float v = t < n ? p.logits.v[r * n + t] : -1.0e30;
    float m = subgroupMax(v);
    if (subgroupElect()) route_red[gl_SubgroupID] = m;
    barrier();
    float mx = -1.0e30;
    for (uint i = 0u; i < parts; i++) mx = max(mx, route_red[i]);
    float e = t < n ? exp(v - mx) : 0.0;
    float es = subgroupAdd(e);
    barrier();
    if (subgroupElect()) route_red[gl_SubgroupID] = es;
    barrier();
    float sum = 0.0;
    for (uint i = 0u; i < parts; i++) sum += route_red[i];
    topk_stage(t, n, e / sum);
    barrier();
    topk_rank(t, n, p.n_used);
    barrier();
    if (t < p.n_used) {
        uint id, at;
        float weight;
        topk_choice(t, p.n_used, id, at, weight);
        route_id[at] = id;
        if (publish) {
            p.ids.v[r * p.n_used + at] = int(id);
            p.slot_w.v[r * p.n_used + at] = weight;
        }
    }
    barrier();
    return route_id[rank];
}

// SWIGLU: a workgroup computes one 32-element block of a slot's SwiGLU: the block's 32 gate
// and 32 up features (products 0..31 and 32..63, FPS per subgroup), then silu(gate) · up and
// its 8-bit copy, which the down products read (the experts' gate/up products and
// swiglu_q8.comp in one dispatch). The block's first 32 invocations take one value each
// (one invocation taking all 32, as store_q8_block does, spent about as long on the epilogue's
// exponentials and its serial maximum as on a memory read); the rounding is store_q8_block's.
shared float res[64];
// Per subgroup: the largest magnitude of its SwiGLU values, and the sum of their 8-bit values.
shared float glu_max[64];
shared int glu_sum[64];
// Each of the 32 8-bit values, shifted to its byte of the word it joins.
shared uint glu_bytes[32];
void main() {
    uint slot = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    uint id = uint64_t(p.logits) != 0ul
        ? route_row(slot / p.n_used, slot % p.n_used, blk == 0u && slot % p.n_used == 0u)
        : uint(p.ids.v[slot]);
    Words wg = expert_weights(p.w, id), wu = expert_weights(p.w2, id);
    for (uint q0 = gl_SubgroupID * FPS; q0 < 64u; q0 += gl_NumSubgroups * FPS) {
        RowRef rows[FPS];
        [[unroll]] for (uint i = 0u; i < FPS; i++) {
            uint q = q0 + i;
            rows[i] = RowRef(q < 32u ? wg : wu, (32u * blk + (q & 31u)) * p.row_bytes);
        }
        float acc[FPS];
        [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] = 0.0;
        dot_rows(acc, rows, slot / p.n_used);
        [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] = subgroupAdd(acc[i]);
        if (gl_SubgroupInvocationID == 0u) {
            [[unroll]] for (uint i = 0u; i < FPS; i++) res[q0 + i] = acc[i];
        }
    }
    barrier();
    uint t = gl_LocalInvocationID.x;
    // Subgroups that hold one of the 32 values.
    uint parts = (32u + gl_SubgroupSize - 1u) / gl_SubgroupSize;
    float h = t < 32u ? swiglu(res[t], res[32u + t]) : 0.0;
    float m = subgroupMax(abs(h));
    if (subgroupElect()) glu_max[gl_SubgroupID] = m;
    barrier();
    float amax = 0.0;
    for (uint i = 0u; i < parts; i++) amax = max(amax, glu_max[i]);
    vec2 sc = q8_scale(amax);
    precise float x = h * sc.y;
    int q = t < 32u ? int(roundEven(x)) : 0;
    int qsum = subgroupAdd(q);
    if (subgroupElect()) glu_sum[gl_SubgroupID] = qsum;
    if (t < 32u) glu_bytes[t] = (uint(q) & 0xffu) << (8u * (t % 4u));
    barrier();
    uint block = slot * (p.n_out / 32u) + blk;
    if (t < 8u) {
        p.out_q.v[8u * block + t] = glu_bytes[4u * t] | glu_bytes[4u * t + 1u] | glu_bytes[4u * t + 2u] | glu_bytes[4u * t + 3u];
    }
    if (t == 0u) {
        int sum = 0;
        for (uint i = 0u; i < parts; i++) sum += glu_sum[i];
        p.out_ds.v[2u * block] = sc.x;
        p.out_ds.v[2u * block + 1u] = sc.x * float(sum);
    }
}
#elif COMBINE
// COMBINE: each subgroup computes one feature of row r's weighted sum over its n_used slots
// (the down products and moe_combine.comp in one dispatch): every lane adds slot_w · its
// blocks' dots for each slot, so one subgroup sum ends both. One feature per subgroup, not
// FPS: the down products have few features, and one per subgroup measured fastest for them.
void main() {
    uint lane = gl_SubgroupInvocationID, width = gl_SubgroupSize;
    uint r = gl_WorkGroupID.y, nb = p.k / 32u;
    Vec4s xq = Vec4s(uint64_t(p.xq));
    Vec2s xds = Vec2s(uint64_t(p.x));
    uint stride = gl_NumWorkGroups.x * gl_NumSubgroups;
    for (uint f = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; f < p.n_out; f += stride) {
        float acc = 0.0;
        // The residual this feature is added to, loaded before the products so that the
        // load's latency overlaps them.
        bool add_to = lane == 0u && p.accumulate != 0u;
        float res = add_to ? p.out_.v[r * p.n_out + f] : 0.0;
        for (uint s = 0u; s < p.n_used; s++) {
            uint slot = r * p.n_used + s;
            Words wm = expert_matrix(p.w, slot);
            float sw = p.slot_w.v[slot];
            for (uint b = lane; b < nb; b += width) {
                uint xv = slot * (p.k / 16u) + 2u * b;
                acc += sw * block_dot(load_block(wm, f * p.row_bytes, b), xq.v[xv], xq.v[xv + 1u], xds.v[slot * nb + b]);
            }
        }
        acc = subgroupAdd(acc);
        if (add_to) acc += res;
        if (lane == 0u) p.out_.v[r * p.n_out + f] = acc;
    }
}
#else
// Weights of feature `f` for expert slot `r`.
RowRef row_of(uint f, uint r) {
    Part pt = part_of(f);
    return RowRef(expert_matrix(pt.w, r), pt.f * p.row_bytes);
}

void main() {
    uint r = gl_WorkGroupID.y;
    uint stride = gl_NumWorkGroups.x * gl_NumSubgroups * FPS;
    for (uint f0 = (gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * FPS; f0 < p.n_out; f0 += stride) {
        // Features past the end repeat the last one and are not stored.
        RowRef rows[FPS];
        [[unroll]] for (uint i = 0u; i < FPS; i++) rows[i] = row_of(min(f0 + i, p.n_out - 1u), r);
        float acc[FPS];
        [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] = 0.0;
        dot_rows(acc, rows, input_row(r));
        [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] = subgroupAdd(acc[i]);
        if (gl_SubgroupInvocationID == 0u) {
            [[unroll]] for (uint i = 0u; i < FPS; i++) {
                if (f0 + i < p.n_out) {
                    Part pt = part_of(f0 + i);
                    pt.out_.v[r * pt.width + pt.f] = acc[i];
                }
            }
        }
    }
}
#endif
