#version 450
// Decode products of the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against one 8-bit
// activation row: mode 0 with one row (a decode step), and the expert modes (mode 1: gate/up,
// input row slot / n_used; mode 2: down; one workgroup row per slot), with products side by
// side (matmul_push.glsl) and, with ROPE_KV, llama's Q/K/V with their RoPE / KV-store
// epilogue.
//
// Each subgroup computes FPS consecutive output features, whatever its width: a lane takes
// blocks lane, lane + width, …; for each it reads the activation block once and the FPS
// weight blocks of that column, all issued before the first multiply, and a subgroup sum ends
// each feature. The row kernel (matmul_q8.comp) gives each feature its own 32 threads, so each
// thread held one activation block per weight block and a short row (2,048 wide: two blocks
// per thread) was over before its loads overlapped; here the loads in flight per thread grow
// with FPS while the activation registers do not. Subgroups loop over feature groups a grid
// apart, so the host caps the grid. Needs subgroup arithmetic only (any subgroup width that
// divides 64), so lavapipe runs the same code as a GPU.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#ifndef ROPE_KV
#define ROPE_KV 0
#endif
#ifndef FPS
#define FPS 4u
#endif
#include "common.glsl"
layout(local_size_x = 64) in;
#include "matmul_push.glsl"
#include "qblock.glsl"
#include "q8_dot.glsl"

// Weights of feature `f` for activation row `r`: the matrix and the row's byte offset.
struct RowRef { Words w; uint rb; };
RowRef row_of(uint f, uint r) {
#if ROPE_KV
    uint role = role_of(f);
    return RowRef(role_matrix(role), (f - role_start(role)) * p.row_bytes);
#else
    Part pt = part_of(f);
    return RowRef(p.mode == 0u ? pt.w : expert_matrix(pt.w, r), pt.f * p.row_bytes);
#endif
}

void main() {
    uint lane = gl_SubgroupInvocationID, width = gl_SubgroupSize;
    uint r = gl_WorkGroupID.y, nb = p.k / 32u;
#if ROPE_KV
    uint xr = r;
#else
    uint xr = p.mode == 0u ? r : input_row(r);
#endif
    Vec4s xq = Vec4s(uint64_t(p.xq));
    Vec2s xds = Vec2s(uint64_t(p.x));
    uint stride = gl_NumWorkGroups.x * gl_NumSubgroups * FPS;
    for (uint f0 = (gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * FPS; f0 < p.n_out; f0 += stride) {
        // Features past the end repeat the last one and are not stored.
        RowRef rows[FPS];
        [[unroll]] for (uint i = 0u; i < FPS; i++) rows[i] = row_of(min(f0 + i, p.n_out - 1u), r);
        float acc[FPS];
        [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] = 0.0;
        for (uint b = lane; b < nb; b += width) {
            uint xv = xr * (p.k / 16u) + 2u * b;
            uvec4 xa = xq.v[xv], xb = xq.v[xv + 1u];
            vec2 ds = xds.v[xr * nb + b];
            RawBlock raw[FPS];
            [[unroll]] for (uint i = 0u; i < FPS; i++) raw[i] = load_raw(rows[i].w, rows[i].rb, b);
            [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] += block_dot(unpack_block(raw[i]), xa, xb, ds);
        }
        [[unroll]] for (uint i = 0u; i < FPS; i++) acc[i] = subgroupAdd(acc[i]);
        if (lane == 0u) {
#if ROPE_KV
            // FPS and every split are even, so each pair is this subgroup's.
            [[unroll]] for (uint i = 0u; i < FPS; i += 2u) {
                if (f0 + i < p.n_out) store_rope_pair(f0 + i, r, acc[i], acc[i + 1u]);
            }
#else
            [[unroll]] for (uint i = 0u; i < FPS; i++) {
                if (f0 + i < p.n_out) {
                    Part pt = part_of(f0 + i);
                    pt.out_.v[r * pt.width + pt.f] = acc[i];
                }
            }
#endif
        }
    }
}
