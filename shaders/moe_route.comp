#version 450
// Router of a mixture of experts, one workgroup per row: softmax over the expert logits, the
// n_used largest (ties to the lower index), weights renormalised to sum to 1. The chosen
// experts are written in ascending id order, the order in which the CPU tier sums them.
// Threads cover the experts (up to 256). Each expert finds its own rank by one pass over the
// probabilities (a decode step has one row, so choices by repeated arg-max reductions, a
// dozen barriers each, were most of the router's time).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P { Floats logits; Ints ids; Floats weights; uint n_expert; uint n_used; uint n_rows; } p;
shared float prob[256];
shared float red_v[256];
shared uint chosen[64];
shared float chosen_p[64];
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
    float pt = e / sum;
    prob[t] = t < p.n_expert ? pt : -1.0;
    // Valid ids in every slot even if NaN logits leave ranks unfilled: an id past the experts
    // would send the expert products outside their weights.
    if (t < 64u) {
        chosen[t] = min(t, p.n_expert - 1u);
        chosen_p[t] = 0.0;
    }
    barrier();
    if (t < p.n_expert) {
        // Larger probability first; on a tie, the lower expert id.
        uint rank = 0u;
        for (uint j = 0u; j < p.n_expert; j++) {
            float pj = prob[j];
            rank += (pj > pt || (pj == pt && j < t)) ? 1u : 0u;
        }
        if (rank < p.n_used) {
            chosen[rank] = t;
            chosen_p[rank] = pt;
        }
    }
    barrier();
    if (t != 0u) return;
    // Renormalise over the choices in rank order (as the CPU tier sums them), then sort the
    // ids ascending (n_used is small).
    float total = 0.0;
    for (uint k = 0u; k < p.n_used; k++) total += chosen_p[k];
    for (uint a = 1u; a < p.n_used; a++) {
        uint x = chosen[a];
        float xp = chosen_p[a];
        uint b = a;
        for (; b > 0u && chosen[b - 1u] > x; b--) {
            chosen[b] = chosen[b - 1u];
            chosen_p[b] = chosen_p[b - 1u];
        }
        chosen[b] = x;
        chosen_p[b] = xp;
    }
    for (uint k = 0u; k < p.n_used; k++) {
        p.ids.v[r * p.n_used + k] = int(chosen[k]);
        p.weights.v[r * p.n_used + k] = chosen_p[k] / total;
    }
}
