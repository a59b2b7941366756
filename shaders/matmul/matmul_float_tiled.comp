#version 450
// Weight (a type without 8-bit activation products: floats and K-quants, dequantized element
// by element) × f32 activation rows, for prompt chunks: a workgroup computes 32 output
// features × 32 rows, staging 32-element slices of both in shared memory, so each weight
// element is decoded once per 32 rows and each activation once per 32 features (the row
// kernel, matmul.comp, decodes a weight element once per 8 rows and reads activations once
// per two features). The workgroup's four groups of 64 threads take every fourth slice of
// k, each thread 4 features × 4 rows, and their sums meet in shared memory at the end: a
// product with few outputs and long rows (an MoE router: 128 experts × 2,048) has few
// workgroups, and each waits on memory once per four slices instead of once per slice.
#include "common/common.glsl"
#include "blocks/dequant.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
} p;
// Per k group: the slice's weights [k][feature] and activations [k][row], rows padded by
// one against bank conflicts (33 KiB in all); at the end the groups' partial sums. LOW_MEM=1
// (for devices that offer 32 KiB of workgroup memory, lavapipe among them) leaves out the
// padding: exactly 32 KiB.
#ifndef LOW_MEM
#define LOW_MEM 0
#endif
const uint T = 32u, BK = 32u, KG = 4u, LDT = LOW_MEM != 0 ? T : T + 1u;
shared float w_s[KG * BK * LDT];
shared float x_s[KG * BK * LDT];

void main() {
    uint li = gl_LocalInvocationIndex, kg = li / 64u, lt = li % 64u;
    // This thread's features tf + 8i and rows tr + 8j of the tile.
    uint tf = lt % 8u, tr = lt / 8u;
    uint f0 = gl_WorkGroupID.x * T, r0 = gl_WorkGroupID.y * T;
    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++) [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    uint gb = kg * BK * LDT;
    for (uint k0 = 0u; k0 < p.k; k0 += KG * BK) {
        uint ks = k0 + kg * BK;
        // Sixteen weight and sixteen activation elements per thread: element e is (feature or
        // row e / 32, k e % 32), so 32 threads read 32 consecutive k of one row.
        [[unroll]] for (uint u = 0u; u < 16u; u++) {
            uint e = lt + 64u * u, kk = e % BK, j = e / BK, i = ks + kk;
            uint f = f0 + j, r = r0 + j;
            // Reads clamped into the tensors, values past their edges zeroed.
            uint ic = min(i, p.k - 1u);
            float wv = dq(p.w, min(f, p.n_out - 1u) * p.row_bytes, ic);
            float xv = p.x.v[min(r, p.n_rows - 1u) * p.k + ic];
            w_s[gb + kk * LDT + j] = f < p.n_out && i < p.k ? wv : 0.0;
            x_s[gb + kk * LDT + j] = r < p.n_rows && i < p.k ? xv : 0.0;
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
            float wv[4], xv[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) wv[i] = w_s[gb + kk * LDT + tf + 8u * i];
            [[unroll]] for (uint j = 0u; j < 4u; j++) xv[j] = x_s[gb + kk * LDT + tr + 8u * j];
            [[unroll]] for (uint i = 0u; i < 4u; i++) [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] += wv[i] * xv[j];
        }
        barrier();
    }
    // The groups' partial sums, [group][feature][row], then each thread adds up four outputs.
    [[unroll]] for (uint i = 0u; i < 4u; i++) [[unroll]] for (uint j = 0u; j < 4u; j++)
        w_s[kg * T * T + (tf + 8u * i) * T + tr + 8u * j] = acc[i][j];
    barrier();
    [[unroll]] for (uint q = 0u; q < 4u; q++) {
        uint o = li + 256u * q, f = o / T, r = o % T;
        float s = 0.0;
        [[unroll]] for (uint g = 0u; g < KG; g++) s += w_s[g * T * T + o];
        if (f0 + f < p.n_out && r0 + r < p.n_rows) p.out_.v[(r0 + r) * p.n_out + f0 + f] = s;
    }
}
