#version 450
// Activation rows to 8 bits in blocks of 32, once per matmul input: values to `xq` (four per
// word), per block (d, d·Σq) to `xds`. Rounds half to even, as the CPU tier does.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Floats x; Words xq; Floats xds; uint k; } p;
void main() {
    uint b = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y, nb = p.k / 32u;
    if (b >= nb) return;
    uint base = r * p.k + b * 32u;
    float x[32];
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        x[j] = p.x.v[base + j];
        amax = max(amax, abs(x[j]));
    }
    float d = div_rn(amax, 127.0), id = d > 0.0 ? div_rn(1.0, d) : 0.0;
    int sum = 0;
    for (uint w = 0u; w < 8u; w++) {
        uint packed = 0u;
        for (uint e = 0u; e < 4u; e++) {
            precise float v = x[4u * w + e] * id;
            int q = int(roundEven(v));
            sum += q;
            packed |= (uint(q) & 0xffu) << (8u * e);
        }
        p.xq.v[r * (p.k / 4u) + 8u * b + w] = packed;
    }
    p.xds.v[2u * (r * nb + b)] = d;
    p.xds.v[2u * (r * nb + b) + 1u] = d * float(sum);
}
