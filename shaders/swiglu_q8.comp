#version 450
// out = silu(gate) * up for one 32-element block per invocation, also quantized to 8 bits for
// the down projection (as quantize_q8.comp does): one dispatch instead of two.
#include "common.glsl"
#include "q8.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Floats gate; Floats up; Floats out_; Words xq; Floats xds; uint n_blocks; } p;
void main() {
    uint b = gl_GlobalInvocationID.x + gl_WorkGroupID.y * 65535u * 64u;
    if (b >= p.n_blocks) return;
    // All loads first, then the stores: the 64 loads can be in flight together.
    float y[32];
    for (uint j = 0u; j < 32u; j++) {
        float g = p.gate.v[32u * b + j];
        precise float v = g / (1.0 + exp(-g)) * p.up.v[32u * b + j];
        y[j] = v;
    }
    for (uint j = 0u; j < 32u; j++) p.out_.v[32u * b + j] = y[j];
    store_q8_block(y, p.xq, p.xds, b);
}
