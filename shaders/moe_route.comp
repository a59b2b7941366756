#version 450
// Router of a mixture of experts, one workgroup per row: softmax over the expert logits, the
// n_used largest (ties to the lower index), weights renormalised to sum to 1. The chosen
// experts are written in ascending id order, the order in which the CPU tier sums them.
// Threads cover the experts (up to 256); each choice is an arg-max reduction in shared memory.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P { Floats logits; Ints ids; Floats weights; uint n_expert; uint n_used; uint n_rows; } p;
shared float prob[256];
shared float red_v[256];
shared uint red_i[256];
shared uint chosen[64];
void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = gl_LocalInvocationID.x, base = r * p.n_expert;
    float v = t < p.n_expert ? p.logits.v[base + t] : -1.0e30;
    red_v[t] = v;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) { if (t < s) red_v[t] = max(red_v[t], red_v[t + s]); barrier(); }
    float mx = red_v[0];
    barrier();
    float e = t < p.n_expert ? exp(v - mx) : 0.0;
    red_v[t] = e;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) { if (t < s) red_v[t] += red_v[t + s]; barrier(); }
    float sum = red_v[0];
    barrier();
    prob[t] = t < p.n_expert ? e / sum : -1.0;
    barrier();
    for (uint k = 0u; k < p.n_used; k++) {
        red_v[t] = prob[t];
        red_i[t] = t;
        barrier();
        for (uint s = 128u; s > 0u; s >>= 1) {
            if (t < s) {
                float a = red_v[t], b = red_v[t + s];
                // Larger probability wins; on a tie, the lower expert id.
                if (b > a || (b == a && red_i[t + s] < red_i[t])) { red_v[t] = b; red_i[t] = red_i[t + s]; }
            }
            barrier();
        }
        if (t == 0u) { chosen[k] = red_i[0]; prob[red_i[0]] = -1.0 - prob[red_i[0]]; }
        barrier();
    }
    if (t != 0u) return;
    // prob of a chosen expert was stored as -1 - p: recover p, sort ids ascending (n_used is
    // small), renormalise.
    float total = 0.0;
    for (uint k = 0u; k < p.n_used; k++) total += -1.0 - prob[chosen[k]];
    for (uint a = 1u; a < p.n_used; a++) {
        uint x = chosen[a];
        uint b = a;
        for (; b > 0u && chosen[b - 1u] > x; b--) chosen[b] = chosen[b - 1u];
        chosen[b] = x;
    }
    for (uint k = 0u; k < p.n_used; k++) {
        p.ids.v[r * p.n_used + k] = int(chosen[k]);
        p.weights.v[r * p.n_used + k] = (-1.0 - prob[chosen[k]]) / total;
    }
}
