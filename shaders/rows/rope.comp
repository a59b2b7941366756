#version 450
// Rotary position embedding in place. One invocation per rotated pair; `neox` pairs (i, i+d/2),
// otherwise (2i, 2i+1).
#include "common/common.glsl"
#include "common/rope.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats x; Ints positions; Floats inv_freq;
    uint width; uint head_dim; uint half_rot; uint neox;
} p;
void main() {
    uint idx = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    uint heads = p.width / p.head_dim;
    if (idx >= heads * p.half_rot) return;
    uint h = idx / p.half_rot, i = idx % p.half_rot;
    vec2 cs = rope_cos_sin(float(p.positions.v[r]), p.inv_freq.v[i]);
    float c = cs.x, s = cs.y;
    uint a = p.neox != 0u ? i : 2u * i, b = p.neox != 0u ? i + p.half_rot : 2u * i + 1u;
    uint base = r * p.width + h * p.head_dim;
    float x0 = p.x.v[base + a], x1 = p.x.v[base + b];
    p.x.v[base + a] = x0 * c - x1 * s;
    p.x.v[base + b] = x0 * s + x1 * c;
}
