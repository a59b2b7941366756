#version 450
// RMS norm of rows whose width is a multiple of 32 (up to 8,192), with subgroup sums: the same
// operation as rms_norm.comp (optional residual add first, written back; optional 8-bit copy
// after), but each invocation owns one 32-element block of the row. Its loads (the row, the
// residual, the norm weights: 24 16-byte loads) are all in flight at once, the sum of squares
// meets in one subgroup sum and one barrier, and the block is quantized by the invocation
// that holds it, so the whole norm has one barrier where rms_norm.comp has about fourteen (a
// decode step normalises one row, twice a layer, so its latency is what counts).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "q8.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Floats x; Floats add; Floats weight; Floats out_; Words xq; Floats xds;
    uint width; float eps;
} p;
shared float partial[256];
void main() {
    uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = gl_LocalInvocationID.x;
    uint blocks = p.width / 32u, base = g * p.width;
    bool mine = t < blocks, has_add = uint64_t(p.add) != 0ul;
    // This invocation's block, as eight 16-byte words (width and base are multiples of 32).
    uint v0 = (base + 32u * min(t, blocks - 1u)) / 4u, g0 = 8u * min(t, blocks - 1u);
    Vec4f xv = Vec4f(uint64_t(p.x)), av = Vec4f(uint64_t(p.add)), wv = Vec4f(uint64_t(p.weight));
    vec4 v[8], gw[8];
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        v[i] = xv.v[v0 + i];
        gw[i] = wv.v[g0 + i];
    }
    if (has_add) {
        [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] += av.v[v0 + i];
    }
    precise float s = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        precise vec4 sq = v[i] * v[i];
        s += (sq.x + sq.y) + (sq.z + sq.w);
    }
    if (!mine) s = 0.0;
    s = subgroupAdd(s);
    if (gl_SubgroupInvocationID == 0u) partial[gl_SubgroupID] = s;
    barrier();
    precise float total = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) total += partial[i];
    if (!mine) return;
    if (has_add) {
        [[unroll]] for (uint i = 0u; i < 8u; i++) xv.v[v0 + i] = v[i];
    }
    precise float ms = div_rn(total, float(p.width)) + p.eps;
    float scale = div_rn(1.0, sqrt_rn(ms));
    Vec4f ov = Vec4f(uint64_t(p.out_));
    float amax = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        precise vec4 y = v[i] * scale * gw[i];
        v[i] = y;
        ov.v[v0 + i] = y;
        vec4 a = abs(y);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    if (uint64_t(p.xq) == 0ul) return;
    // The block's 8-bit copy: words 8·block.., scale pair 2·block (block = base / 32 + t).
    uint blk = base / 32u + t;
    vec2 sc = q8_scale(amax);
    int sum = 0;
    uvec4 lo, hi;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        lo[i] = q8_pack4(v[i], sc.y, sum);
        hi[i] = q8_pack4(v[4u + i], sc.y, sum);
    }
    Vec4s qv = Vec4s(uint64_t(p.xq));
    qv.v[2u * blk] = lo;
    qv.v[2u * blk + 1u] = hi;
    p.xds.v[2u * blk] = sc.x;
    p.xds.v[2u * blk + 1u] = sc.x * float(sum);
}
