#version 450
// RMS norm over groups of `width` elements (a row, or one head for qwen3's Q/K norms), in
// place or into another buffer: out = x / sqrt(mean(x²) + eps) * weight[i % weight_len].
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats x; Floats weight; Floats out_;
    uint width; float eps;
} p;
shared float partial[64];
void main() {
    uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = gl_LocalInvocationID.x;
    uint base = g * p.width;
    float s = 0.0;
    for (uint i = t; i < p.width; i += 64u) { precise float v = p.x.v[base + i]; s += v * v; }
    partial[t] = s;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) { if (t < k) partial[t] += partial[t + k]; barrier(); }
    precise float ms = div_rn(partial[0], float(p.width)) + p.eps;
    float scale = div_rn(1.0, sqrt_rn(ms));
    for (uint i = t; i < p.width; i += 64u) { precise float y = p.x.v[base + i] * scale * p.weight.v[i]; p.out_.v[base + i] = y; }
}
