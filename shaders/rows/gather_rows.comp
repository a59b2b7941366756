#version 450
// out[j] = x[rows[j]]: keeps the rows whose logits were asked for.
#include "common/common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats x; Ints rows; Floats out_;
    uint width;
} p;
void main() {
    uint i = gl_GlobalInvocationID.x, j = gl_WorkGroupID.y;
    if (i >= p.width) return;
    p.out_.v[j * p.width + i] = p.x.v[uint(p.rows.v[j]) * p.width + i];
}
