#version 450
// Adds the partial sums of a matrix-unit product split over k (matmul_coopmat.comp's SPLIT_K:
// `splits` slices of n_rows × n_out floats) in slice order, so a result never depends on which
// workgroup finished first, and stores each feature in its product's output: products side by
// side have features from `split1` in `out2` and from `split2` in `out3`, each output its own
// rows of its own width.
#include "common/common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Floats partial; Floats out_; Floats out2; Floats out3;
    uint n_out; uint n_rows; uint splits; uint split1; uint split2;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 256u;
    uint total = p.n_rows * p.n_out;
    if (i >= total) return;
    float sum = 0.0;
    for (uint z = 0u; z < p.splits; z++) sum += p.partial.v[z * total + i];
    uint r = i / p.n_out, o = i % p.n_out;
    if (o >= p.split2) {
        p.out3.v[r * (p.n_out - p.split2) + o - p.split2] = sum;
    } else if (o >= p.split1) {
        p.out2.v[r * (p.split2 - p.split1) + o - p.split1] = sum;
    } else {
        p.out_.v[r * p.split1 + o] = sum;
    }
}
