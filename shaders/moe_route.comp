#version 450
// Router of a mixture of experts, one workgroup per row (moe_topk.glsl).
#include "common.glsl"
layout(local_size_x = 256) in;
#define ROUTE_THREADS 256u
#include "moe_topk.glsl"
layout(push_constant) uniform P { Floats logits; Ints ids; Floats weights; uint n_expert; uint n_used; uint n_rows; } p;
void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    route_row(uint64_t(p.logits), r, p.ids, p.weights, p.n_expert, p.n_used);
}
