#version 450
// out = a + b (op 0) or silu(a) * b (op 1); operands may alias the output.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Floats a; Floats b; Floats out_;
    uint n; uint op;
} p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_WorkGroupID.y * 65535u * 256u;
    if (i >= p.n) return;
    float x = p.a.v[i], y = p.b.v[i];
    p.out_.v[i] = p.op == 0u ? x + y : x / (1.0 + exp(-x)) * y;
}
