#version 450
// Weight (any GGUF type, dequantized element by element) × f32 activation rows. The CPU tier
// dots K-quant and float weights against f32 activations the same way.
#include "common.glsl"
#include "dequant.glsl"
#include "matmul_common.glsl"
void main() {
    uint o = out_feature(), t = lane();
    // Threads past the last feature still take part in the barrier, with nothing to add.
    uint k_end = o < p.n_out ? p.k : 0u;
    float acc[ROWS] = float[ROWS](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if (p.mode == 0u) {
        uint r0 = gl_WorkGroupID.y * ROWS, n = min(ROWS, p.n_rows - r0);
        uint rb = min(o, p.n_out - 1u) * p.row_bytes;
        for (uint i = t; i < k_end; i += TPR) {
            float wv = dq(p.w, rb, i);
            // Constant bounds keep acc[] in registers.
            for (uint j = 0u; j < ROWS; j++) if (j < n) acc[j] += wv * p.x.v[(r0 + j) * p.k + i];
        }
        reduce_and_store(acc, o, r0, n);
    } else {
        uint r = gl_WorkGroupID.y;
        Words wm = expert_matrix(r);
        uint xr = input_row(r) * p.k, rb = min(o, p.n_out - 1u) * p.row_bytes;
        for (uint i = t; i < k_end; i += TPR) acc[0] += dq(wm, rb, i) * p.x.v[xr + i];
        reduce_and_store(acc, o, r, 1u);
    }
}
