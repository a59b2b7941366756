#version 450
// Weight (a type without 8-bit activation products: floats and K-quants, dequantized element
// by element) × f32 activation rows, for prompt chunks: a workgroup computes 32 output
// features × 32 rows, staging 32-element slices of both in shared memory, so each weight
// element is decoded once per 32 rows and each activation once per 32 features (the row
// kernel, matmul.comp, decodes a weight element once per 8 rows and reads activations once
// per two features). Each thread owns 2 features × 2 rows. An MoE router (f32, 128 experts)
// in a 512-row chunk is its main user; the CPU tier dots the same products in f32 too.
#include "common.glsl"
#include "dequant.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
} p;
const uint T = 32u, BK = 32u;
// [k][feature pairs] and [k][row pairs]; one padding pair per k against bank conflicts.
shared vec2 w_s[BK][T / 2u + 1u];
shared vec2 x_s[BK][T / 2u + 1u];

void main() {
    uint li = gl_LocalInvocationIndex, tf = li % 16u, tr = li / 16u;
    uint f0 = gl_WorkGroupID.x * T, r0 = gl_WorkGroupID.y * T;
    vec2 acc0 = vec2(0.0), acc1 = vec2(0.0); // rows 2tr and 2tr + 1, features 2tf, 2tf + 1
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        // Four weight and four activation elements per thread: element e is (pair e / 64,
        // member (e / 32) % 2, k e % 32), so 32 threads read 32 consecutive k of one row.
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint e = li + 256u * u, kk = e % BK, j = e / BK, i = k0 + kk;
            uint f = f0 + j, r = r0 + j;
            // Reads clamped into the tensors, values past their edges zeroed.
            uint ic = min(i, p.k - 1u);
            float wv = dq(p.w, min(f, p.n_out - 1u) * p.row_bytes, ic);
            float xv = p.x.v[min(r, p.n_rows - 1u) * p.k + ic];
            if (f >= p.n_out || i >= p.k) wv = 0.0;
            if (r >= p.n_rows || i >= p.k) xv = 0.0;
            if ((j & 1u) == 0u) {
                w_s[kk][j / 2u].x = wv;
                x_s[kk][j / 2u].x = xv;
            } else {
                w_s[kk][j / 2u].y = wv;
                x_s[kk][j / 2u].y = xv;
            }
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
            vec2 wv = w_s[kk][tf], xv = x_s[kk][tr];
            acc0 += wv * xv.x;
            acc1 += wv * xv.y;
        }
        barrier();
    }
    uint f = f0 + 2u * tf, r = r0 + 2u * tr;
    [[unroll]] for (uint a = 0u; a < 2u; a++) {
        vec2 acc = a == 0u ? acc0 : acc1;
        if (r + a < p.n_rows) {
            if (f < p.n_out) p.out_.v[(r + a) * p.n_out + f] = acc.x;
            if (f + 1u < p.n_out) p.out_.v[(r + a) * p.n_out + f + 1u] = acc.y;
        }
    }
}
