#version 450
// out = a + b (op 0), silu(a) * b (op 1), gelu(a) * b with GELU's tanh form (op 2, Gemma's
// feed-forward), a * factor (op 3, b unread), a + b[i mod width] (op 4: b a vector added
// to every row, Qwen2's biases), factor · tanh(a / factor) (op 5, b unread: Gemma 2's soft
// cap on its logits), or a · factor for the first `width >> 16` elements of every head of
// `width & 0xffff` and a elsewhere (op 6, b unread: an attention factor on the rotated
// elements of partly rotated heads); operands may alias the output.
#include "common/common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Floats a; Floats b; Floats out_;
    uint n; uint op; float factor; uint width;
} p;
void main() {
    uint i = gl_GlobalInvocationID.x + gl_WorkGroupID.y * 65535u * 256u;
    if (i >= p.n) return;
    float x = p.a.v[i];
    float y;
    if (p.op == 6u) {
        y = i % (p.width & 0xffffu) < (p.width >> 16) ? x * p.factor : x;
    } else if (p.op == 5u) {
        y = p.factor * tanh_finite(x / p.factor);
    } else if (p.op == 4u) {
        y = x + p.b.v[i % p.width];
    } else if (p.op == 3u) {
        y = x * p.factor;
    } else if (p.op == 2u) {
        float u = 0.7978845608 * x * (1.0 + 0.044715 * x * x);
        y = 0.5 * x * (2.0 - 2.0 / (exp(2.0 * u) + 1.0)) * p.b.v[i];
    } else {
        float b = p.b.v[i];
        y = p.op == 0u ? x + b : x / (1.0 + exp(-x)) * b;
    }
    p.out_.v[i] = y;
}
