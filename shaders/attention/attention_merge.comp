#version 450
// Combines the key-split partial results of attention.comp (running maximum m, sum l and
// unnormalised output per split) into each row's head output: scale each split by
// exp(m_s - M), sum, divide by the scaled sum. One workgroup per head and row; also writes
// the output's 8-bit copy when `xq` is set, as attention.comp does.
#include "common/common.glsl"
#include "common/q8.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    Floats partial; Floats out_; Words xq; Floats xds;
    uint n_head; uint head_dim; uint splits;
} p;
shared float o_s[256];
void main() {
    uint h = gl_WorkGroupID.x, r = gl_WorkGroupID.y, t = gl_LocalInvocationID.x, hd = p.head_dim;
    uint first = (r * p.n_head + h) * p.splits * (hd + 2u), stride = hd + 2u;
    float mx = -1.0e30;
    for (uint s = 0u; s < p.splits; s++) mx = max(mx, p.partial.v[first + s * stride]);
    float total = 0.0;
    for (uint s = 0u; s < p.splits; s++) {
        uint at = first + s * stride;
        total += p.partial.v[at + 1u] * exp(p.partial.v[at] - mx);
    }
    uint q_base = r * p.n_head * hd + h * hd;
    for (uint d = t; d < hd; d += 64u) {
        float o = 0.0;
        for (uint s = 0u; s < p.splits; s++) {
            uint at = first + s * stride;
            o += p.partial.v[at + 2u + d] * exp(p.partial.v[at] - mx);
        }
        o /= total;
        p.out_.v[q_base + d] = o;
        o_s[d] = o;
    }
    if (uint64_t(p.xq) == 0ul) return;
    barrier();
    if (t < hd / 32u) {
        float blk[32];
        for (uint j = 0u; j < 32u; j++) blk[j] = o_s[32u * t + j];
        store_q8_block(blk, p.xq, p.xds, q_base / 32u + t);
    }
}
