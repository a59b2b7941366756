#version 450
// out[r] = Σ_s weights[r, s] · y[r · n_used + s], summed in ascending expert order.
#include "common/common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Floats y; Floats weights; Floats out_; uint width; uint n_used; } p;
void main() {
    uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (i >= p.width) return;
    float acc = 0.0;
    for (uint s = 0u; s < p.n_used; s++) acc += p.weights.v[r * p.n_used + s] * p.y.v[(r * p.n_used + s) * p.width + i];
    p.out_.v[r * p.width + i] = acc;
}
