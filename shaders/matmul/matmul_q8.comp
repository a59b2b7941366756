#version 450
// Weight (32-element GGUF formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) × activation rows quantized
// to 8 bits in blocks of 32 (quantize_q8.comp), with integer multiply-adds per block as the
// CPU tier does. INT_DOT=1 uses the device's packed 4×8-bit dot product instruction.
#ifndef SG_REDUCE
#define SG_REDUCE 0
#endif
#ifndef ROPE_KV
#define ROPE_KV 0
#endif
#ifndef SHARED_X
#define SHARED_X 0
#endif
#ifndef GLU_OUT
#define GLU_OUT 0
#endif
#if SG_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#if SHARED_X
#extension GL_KHR_shader_subgroup_clustered : require
#endif
#include "common/common.glsl"
#include "matmul/matmul_common.glsl"
#include "blocks/qblock.glsl"
#include "blocks/q8_dot.glsl"
#if SHARED_X
#include "common/q8.glsl"
#endif

// One activation row against one weight row (`wm`, `rb`): decode, and every expert product.
// A thread takes whole blocks (a warp reads 32 consecutive ones), UNROLL per iteration with
// every load issued before the first multiply: a single row is bound by memory latency
// unless each thread keeps several loads in flight. Two, not more: each block in flight holds
// about 15 registers (its quants, scale and activation block), and on the H200 fewer
// registers (more resident subgroups) paid more than more loads per thread (2 against 4 and
// 8 per iteration). Branch-free: blocks past the end read the last block and count zero.
#define UNROLL 2u
#if SHARED_X
// SHARED_X (decode: one activation row, subgroup sums, 512-wide workgroups): the workgroup
// first copies the row's 8-bit blocks to shared memory, and every weight row reads them there
// instead of through the cache, which every block's dot product otherwise waits on as well as
// on the weights (docs/measurements/vulkan-h200-session11-2026-12-03/). Rows up to
// MAX_SHARED_K (the host checks); single_row then ignores `xr`.
#define MAX_SHARED_K 16384u
shared uvec4 x_s[MAX_SHARED_K / 16u];
shared vec2 ds_s[MAX_SHARED_K / 32u];
shared float squares_s[uint(WG_SIZE) / 32u];

#if !ROPE_KV
// The row as the producer wrote it: its 8-bit blocks and their scales, copied.
void stage_row() {
    Vec4s xq = Vec4s(uint64_t(p.xq));
    Vec2s xds = Vec2s(uint64_t(p.x));
    for (uint i = gl_LocalInvocationID.x; i < p.k / 16u; i += uint(WG_SIZE)) x_s[i] = xq.v[i];
    for (uint i = gl_LocalInvocationID.x; i < p.k / 32u; i += uint(WG_SIZE)) ds_s[i] = xds.v[i];
    barrier();
}
#endif

// The RMS norm that the host folded into this product (`norm_w` set): `x` is the f32 row
// before the norm, and every workgroup normalises it and quantizes the result as rms_norm.comp
// would have (the same formula and roundings; only the order of the sum of squares differs,
// as it does between that kernel and the CPU tier). This saves the norm's own one-workgroup
// dispatch and the barrier after it. One word of four values per invocation and pass, in
// subgroup order, so that a block's eight words are one cluster of eight invocations that
// find its largest magnitude and its sum without shared memory or barriers; nothing is held
// across passes (the row is read twice, the second time from cache), because registers held
// here would be taken from the dot products' occupancy for the whole kernel: a build that
// kept each thread's block in registers made every product of this kernel slower on the H200.
void stage_normed_row() {
    Vec4f xf = Vec4f(uint64_t(p.x)), gf = Vec4f(uint64_t(p.norm_w));
    uint t = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID, words = p.k / 4u;
    float s = 0.0;
    for (uint w = t; w < words; w += uint(WG_SIZE)) {
        vec4 v = xf.v[w];
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            precise float sq = v[e] * v[e];
            s += sq;
        }
    }
    s = subgroupAdd(s);
    if (subgroupElect()) squares_s[gl_SubgroupID] = s;
    barrier();
    float total = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) total += squares_s[i];
    precise float ms = div_rn(total, float(p.k)) + p.eps;
    float scale = div_rn(1.0, sqrt_rn(ms));
    // Every invocation takes part in each pass's cluster operations (a block's eight words
    // are all in the row or all past it: rows are whole blocks).
    for (uint w0 = 0u; w0 < words; w0 += uint(WG_SIZE)) {
        uint w = w0 + t;
        bool in_row = w < words;
        vec4 v = xf.v[min(w, words - 1u)], g = gf.v[min(w, words - 1u)];
        vec4 y;
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            precise float ye = v[e] * scale * g[e];
            y[e] = ye;
        }
        float amax = subgroupClusteredMax(max(max(abs(y.x), abs(y.y)), max(abs(y.z), abs(y.w))), 8u);
        vec2 sc = q8_scale(amax);
        int sum = 0;
        uint packed = q8_pack4(y, sc.y, sum);
        sum = subgroupClusteredAdd(sum, 8u);
        if (in_row) {
            x_s[w / 4u][w % 4u] = packed;
            if (w % 8u == 0u) ds_s[w / 8u] = vec2(sc.x, sc.x * float(sum));
        }
    }
    barrier();
}
#endif
float single_row(Words wm, uint rb, uint xr, uint nb, uint t) {
#if !SHARED_X
    Vec4s xq = Vec4s(uint64_t(p.xq));
    Vec2s xds = Vec2s(uint64_t(p.x));
#endif
    float a = 0.0;
    for (uint b = t; b < nb; b += UNROLL * TPR) {
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            uint bb = min(b + u * TPR, nb - 1u);
            float keep = b + u * TPR < nb ? 1.0 : 0.0;
#if SHARED_X
            a += keep * block_dot(load_block(wm, rb, bb), x_s[2u * bb], x_s[2u * bb + 1u], ds_s[bb]);
#else
            uint xv = xr * (p.k / 16u) + 2u * bb;
            a += keep * block_dot(load_block(wm, rb, bb), xq.v[xv], xq.v[xv + 1u], xds.v[xr * nb + bb]);
#endif
        }
    }
    return a;
}

#if SHARED_X && (ROPE_KV || GLU_OUT)
// Both rows of a feature pair (weights at `rb0`, `rb1`) against the staged row, in one loop:
// twice the loads in flight per thread, and half the dependent rounds, of two single_row calls.
vec2 pair_rows(Words wm, uint rb0, uint rb1, uint nb, uint t) {
    vec2 a = vec2(0.0);
    for (uint b = t; b < nb; b += UNROLL * TPR) {
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            uint bb = min(b + u * TPR, nb - 1u);
            float keep = b + u * TPR < nb ? 1.0 : 0.0;
            WBlock w0 = load_block(wm, rb0, bb), w1 = load_block(wm, rb1, bb);
            a.x += keep * block_dot(w0, x_s[2u * bb], x_s[2u * bb + 1u], ds_s[bb]);
            a.y += keep * block_dot(w1, x_s[2u * bb], x_s[2u * bb + 1u], ds_s[bb]);
        }
    }
    return a;
}
#endif

#if SHARED_X && GLU_OUT
// Gate (`w`, features below `split1`) and up (`w2`) of a dense FFN with SwiGLU and its 8-bit
// copy as their epilogue, so that the down product reads what swiglu_q8.comp would have
// written without that dispatch and its barrier: silu(gate) · up to `out_`, the copy's words
// to `out2` and each block's (d, d·Σq) to `out3`. A workgroup owns whole 32-wide blocks of the
// result, one at a time: each subgroup computes two features' gate and up rows, the sums meet
// in shared memory, and the first subgroup (32 invocations, one per value) forms the block.
// The two halves of `glu_s` alternate by block, so one barrier per block suffices: a subgroup
// can write a half again only after the first subgroup has passed the next block's barrier,
// which it reaches after reading that half.
shared float glu_s[2][64];
void glu_main() {
    if (uint64_t(p.norm_w) != 0ul) {
        stage_normed_row();
    } else {
        stage_row();
    }
    uint t = lane(), s = gl_LocalInvocationID.x / TPR, nb = p.k / 32u, half_ = 0u;
    Words xq = Words(uint64_t(p.out2));
    for (uint blk = gl_WorkGroupID.x; blk < p.split1 / 32u; blk += gl_NumWorkGroups.x) {
        uint rb = (32u * blk + 2u * s) * p.row_bytes;
        vec2 g = subgroupAdd(pair_rows(p.w, rb, rb + p.row_bytes, nb, t));
        vec2 u = subgroupAdd(pair_rows(p.w2, rb, rb + p.row_bytes, nb, t));
        if (t == 0u) {
            glu_s[half_][2u * s] = g.x;
            glu_s[half_][2u * s + 1u] = g.y;
            glu_s[half_][32u + 2u * s] = u.x;
            glu_s[half_][33u + 2u * s] = u.y;
        }
        barrier();
        if (s == 0u) {
            float h = swiglu(glu_s[half_][t], glu_s[half_][32u + t]);
            p.out_.v[32u * blk + t] = h;
            vec2 sc = q8_scale(subgroupMax(abs(h)));
            precise float x = h * sc.y;
            int q = int(roundEven(x));
            int sum = subgroupAdd(q);
            uint word = subgroupClusteredOr((uint(q) & 0xffu) << (8u * (t % 4u)), 4u);
            if (t % 4u == 0u) xq.v[8u * blk + t / 4u] = word;
            if (t == 0u) {
                p.out3.v[2u * blk] = sc.x;
                p.out3.v[2u * blk + 1u] = sc.x * float(sum);
            }
        }
        half_ ^= 1u;
    }
}
#endif

void main() {
#if SHARED_X && GLU_OUT
    glu_main();
#elif SHARED_X && ROPE_KV
    // Decode Q, K and V with their norm folded in: each subgroup walks feature pairs a grid
    // apart (a pair is rotated together), both of a pair's rows, then the RoPE / KV-store
    // epilogue.
    stage_normed_row();
    uint t = lane();
    for (uint o = 2u * out_feature(); o < p.n_out; o += 2u * gl_NumWorkGroups.x * RPW) {
        uint role = role_of(o);
        Words wr = role_matrix(role);
        uint rb = (o - role_start(role)) * p.row_bytes;
        vec2 s = subgroupAdd(pair_rows(wr, rb, rb + p.row_bytes, p.k / 32u, t));
        if (t == 0u) store_rope_pair(o, 0u, s.x, s.y);
    }
#else
#if SHARED_X
    if (uint64_t(p.norm_w) != 0ul) {
        stage_normed_row();
    } else {
        stage_row();
    }
#endif
    uint o = out_feature(), t = lane();
    // Threads past the last feature still take part in the barrier, with nothing to add.
    uint nb = o < p.n_out ? p.k / 32u : 0u;
    float acc[ROWS] = float[ROWS](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
#if defined(ROPE_KV) && ROPE_KV
    uint oc = min(o, p.n_out - 1u), role = role_of(oc);
    Words wo = role_matrix(role);
    uint rb = (oc - role_start(role)) * p.row_bytes;
#else
    Part pt = part_of(min(o, p.n_out - 1u));
    Words wo = pt.w;
    uint rb = pt.f * p.row_bytes;
#endif
    if (P_MODE == 0u && p.n_rows > 1u) {
        // Small batches: each weight block is loaded and unpacked once, then dotted with
        // every row's activation block (two 16-byte loads and one 8-byte load per row).
        uint r0 = gl_WorkGroupID.y * ROWS, n = min(ROWS, p.n_rows - r0);
        Vec4s xq = Vec4s(uint64_t(p.xq));
        Vec2s xds = Vec2s(uint64_t(p.x));
        for (uint b = t; b < nb; b += TPR) {
            WBlock wb = load_block(wo, rb, b);
            // Constant bounds keep acc[] in registers (a bound of n would index it at run
            // time, which spills it to memory on some compilers).
            for (uint j = 0u; j < ROWS; j++) {
                if (j < n) {
                    uint xr = r0 + j, xv = xr * (p.k / 16u) + 2u * b;
                    acc[j] += block_dot(wb, xq.v[xv], xq.v[xv + 1u], xds.v[xr * nb + b]);
                }
            }
        }
        reduce_and_store(acc, o, r0, n);
    } else {
        uint r = gl_WorkGroupID.y;
#if defined(ROPE_KV) && ROPE_KV
        acc[0] = single_row(wo, rb, r, nb, t);
#else
#if defined(SG_REDUCE) && SG_REDUCE
        if (P_MODE == 0u) {
            // Decode: the host caps the grid and each subgroup walks features a grid apart,
            // staying resident instead of ending after one feature (no workgroup barrier here,
            // so subgroups may run different counts).
            uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.z * RPW;
            for (uint f = o; f < p.n_out; f += stride) {
                Part pf = part_of(f);
#if SHARED_X
                // The residual add folded into the product (the output is the residual), its
                // value loaded before the dot product so that the load's latency overlaps it.
                bool add_to = t == 0u && p.accumulate != 0u;
                float res = add_to ? pf.out_.v[r * pf.width + pf.f] : 0.0;
#endif
                float s = subgroupAdd(single_row(pf.w, pf.f * p.row_bytes, r, p.k / 32u, t));
#if SHARED_X
                if (add_to) s += res;
#endif
                if (t == 0u) pf.out_.v[r * pf.width + pf.f] = s;
            }
            return;
        }
#endif
        Words wm = p.mode == 0u ? wo : expert_matrix(wo, r);
        acc[0] = single_row(wm, rb, p.mode == 0u ? r : input_row(r), nb, t);
#endif
        reduce_and_store(acc, o, r, 1u);
    }
#endif
}
