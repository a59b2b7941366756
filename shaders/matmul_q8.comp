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
#if SG_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"
#include "matmul_common.glsl"
#include "qblock.glsl"
#include "q8_dot.glsl"

// One activation row against one weight row (`wm`, `rb`): decode, and every expert product.
// A thread takes whole blocks (a warp reads 32 consecutive ones), UNROLL per iteration with
// every load issued before the first multiply: a single row is bound by memory latency
// unless each thread keeps several loads in flight. Two, not more: each block in flight holds
// about 15 registers (its quants, scale and activation block), and on the H200 fewer
// registers (more resident subgroups) paid more than more loads per thread (tg128, dense
// 7.4B: 8 per iteration 355, 4 per iteration 368-384, 2 per iteration 386; 30B-A3B 251, 280,
// 294). Branch-free: blocks past the end read the last block and count zero.
#define UNROLL 2u
#if SHARED_X
// SHARED_X (decode: one activation row, subgroup sums, 512-wide workgroups): the workgroup
// first copies the row's 8-bit blocks to shared memory, and every weight row reads them there
// instead of through the cache, which every block's dot product otherwise waits on as well as
// on the weights (H200, dense 7.4B tg128 380-385 -> 412-416; a build that dotted constants
// instead of loading activations had shown 388 -> 421). Rows up to MAX_SHARED_K (the host
// checks); single_row then ignores `xr`.
#define MAX_SHARED_K 16384u
shared uvec4 x_s[MAX_SHARED_K / 16u];
shared vec2 ds_s[MAX_SHARED_K / 32u];
#endif
float single_row(Words wm, uint rb, uint xr, uint nb, uint t) {
    Vec4s xq = Vec4s(uint64_t(p.xq));
    Vec2s xds = Vec2s(uint64_t(p.x));
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

void main() {
#if SHARED_X
    {
        Vec4s xq = Vec4s(uint64_t(p.xq));
        Vec2s xds = Vec2s(uint64_t(p.x));
        for (uint i = gl_LocalInvocationID.x; i < p.k / 16u; i += uint(WG_SIZE)) x_s[i] = xq.v[i];
        for (uint i = gl_LocalInvocationID.x; i < p.k / 32u; i += uint(WG_SIZE)) ds_s[i] = xds.v[i];
        barrier();
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
                float s = subgroupAdd(single_row(pf.w, pf.f * p.row_bytes, r, p.k / 32u, t));
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
}
