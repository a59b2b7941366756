#version 450
// Embedding lookup: out[r] = dequantize(table row tokens[r]).
#include "common/common.glsl"
#include "blocks/dequant.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Words table; Ints tokens; Floats out_;
    uint width; uint row_bytes;
} p;
void main() {
    uint i = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (i >= p.width) return;
    uint tok = uint(p.tokens.v[r]);
    p.out_.v[r * p.width + i] = dq(p.table, tok * p.row_bytes, i);
}
