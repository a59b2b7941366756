#version 450
// Router of a mixture of experts, one row per invocation: softmax over the expert logits, the
// n_used largest (ties to the lower index), weights renormalised to sum to 1. The chosen
// experts are written in ascending id order, the order in which the CPU tier sums them.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P { Floats logits; Ints ids; Floats weights; uint n_expert; uint n_used; uint n_rows; } p;
void main() {
    uint r = gl_GlobalInvocationID.x;
    if (r >= p.n_rows) return;
    uint base = r * p.n_expert;
    float mx = -1.0e30;
    for (uint e = 0u; e < p.n_expert; e++) mx = max(mx, p.logits.v[base + e]);
    float sum = 0.0;
    for (uint e = 0u; e < p.n_expert; e++) sum += exp(p.logits.v[base + e] - mx);
    // Pick by repeated arg-max; a chosen expert is marked by an id bitmask (up to 256 experts).
    uint chosen[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    float total = 0.0;
    for (uint s = 0u; s < p.n_used; s++) {
        uint best = 0u; float bv = -1.0;
        for (uint e = 0u; e < p.n_expert; e++) {
            if ((chosen[e >> 5] & (1u << (e & 31u))) != 0u) continue;
            float pe = exp(p.logits.v[base + e] - mx) / sum;
            if (pe > bv) { bv = pe; best = e; }
        }
        chosen[best >> 5] |= 1u << (best & 31u);
        total += bv;
    }
    uint s = 0u;
    for (uint e = 0u; e < p.n_expert; e++) {
        if ((chosen[e >> 5] & (1u << (e & 31u))) == 0u) continue;
        p.ids.v[r * p.n_used + s] = int(e);
        p.weights.v[r * p.n_used + s] = exp(p.logits.v[base + e] - mx) / sum / total;
        s++;
    }
}
