#version 450
// 8-bit activation rows (quantize_q8.comp's blocks) to half precision for the matrix-unit
// product (matmul_coopmat.comp), once per product input instead of once per workgroup: each
// value d·q rounded once, in the kernel's order along k (values 0, 2, 1, 3 of each group of
// four, the order its weight unpacking produces).
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common/common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Vec4s xq; Vec2s xds; Vec4s out_; uint n_blocks; } p;

// Values 4i .. 4i+3 of a block word as halves, in the order (0, 2, 1, 3).
uvec2 pairs(uint w, float d) {
    vec4 v = vec4(sext8(w), sext8(w >> 8), sext8(w >> 16), sext8(w >> 24)) * d;
    return uvec2(packHalf2x16(v.xz), packHalf2x16(v.yw));
}

void main() {
    uint b = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (b >= p.n_blocks) return;
    float d = p.xds.v[b].x;
    [[unroll]] for (uint h = 0u; h < 2u; h++) {
        uvec4 q = p.xq.v[2u * b + h];
        uvec2 a = pairs(q.x, d), c = pairs(q.y, d), e = pairs(q.z, d), f = pairs(q.w, d);
        p.out_.v[4u * b + 2u * h] = uvec4(a, c);
        p.out_.v[4u * b + 2u * h + 1u] = uvec4(e, f);
    }
}
