#version 450
// out = silu(gate) * up, also quantized to 8 bits for the down projection (as quantize_q8.comp
// does): one dispatch instead of two. One word of four values per thread, 16-byte loads; a
// block's eight threads meet in shared memory for its largest magnitude and its sum, so a
// decode row (a few thousand values) spreads over dozens of workgroups instead of a few
// threads walking whole blocks.
#include "common/common.glsl"
#include "common/q8.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Floats gate; Floats up; Floats out_; Words xq; Floats xds; uint n_blocks; } p;
shared float amax_s[64];
shared int sum_s[64];
void main() {
    uint t = gl_LocalInvocationID.x, first = t & ~7u;
    uint w = (gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u) * 64u + t;
    bool live = w < p.n_blocks * 8u;
    vec4 y = vec4(0.0);
    if (live) {
        vec4 g = Vec4f(uint64_t(p.gate)).v[w], u = Vec4f(uint64_t(p.up)).v[w];
        [[unroll]] for (uint e = 0u; e < 4u; e++) y[e] = swiglu(g[e], u[e]);
        Vec4f(uint64_t(p.out_)).v[w] = y;
    }
    amax_s[t] = max(max(abs(y.x), abs(y.y)), max(abs(y.z), abs(y.w)));
    barrier();
    float amax = 0.0;
    for (uint i = 0u; i < 8u; i++) amax = max(amax, amax_s[first + i]);
    vec2 sc = q8_scale(amax);
    int sum = 0;
    uint packed = q8_pack4(y, sc.y, sum);
    sum_s[t] = sum;
    barrier();
    if (!live) return;
    p.xq.v[w] = packed;
    if (t == first) {
        int total = 0;
        for (uint i = 0u; i < 8u; i++) total += sum_s[t + i];
        p.xds.v[2u * (w / 8u)] = sc.x;
        p.xds.v[2u * (w / 8u) + 1u] = sc.x * float(total);
    }
}
