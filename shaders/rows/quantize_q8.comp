#version 450
// Activation rows to 8 bits in blocks of 32, once per matmul input: values to `xq` (four per
// word), per block (d, d·Σq) to `xds`. Rounds half to even, as the CPU tier does.
#include "common/common.glsl"
#include "common/q8.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Floats x; Words xq; Floats xds; uint k; } p;
void main() {
    uint b = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y, nb = p.k / 32u;
    if (b >= nb) return;
    uint base = r * p.k + b * 32u;
    float x[32];
    for (uint j = 0u; j < 32u; j++) x[j] = p.x.v[base + j];
    store_q8_block(x, p.xq, p.xds, r * nb + b);
}
