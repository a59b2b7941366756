#version 450
// Router of a mixture of experts, one workgroup per row: softmax over the expert logits, then
// the choice of topk.glsl (the n_used largest, ties to the lower index, weights renormalised,
// ids ascending). Threads cover the experts (up to 256).
#include "common/common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P { Floats logits; Ints ids; Floats weights; uint n_expert; uint n_used; uint n_rows; } p;
shared float red_v[256];
#include "common/topk.glsl"
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
    topk_stage(t, p.n_expert, e / sum);
    barrier();
    topk_rank(t, p.n_expert, p.n_used);
    barrier();
    if (t < p.n_used) {
        uint id, at;
        float weight;
        topk_choice(t, p.n_used, id, at, weight);
        p.ids.v[r * p.n_used + at] = int(id);
        p.weights.v[r * p.n_used + at] = weight;
    }
}
