// The residual add and RMS norm that follow a decode product (one row), run by the product's
// last workgroup (last_workgroup.glsl): rms_norm.comp's x += add,
// out = x / sqrt(mean(x²) + eps) · weight and its 8-bit copy, over the row the other
// workgroups just wrote. Needs common.glsl.
#ifndef TAIL_NORM_GLSL
#define TAIL_NORM_GLSL
#include "q8.glsl"
#include "last_workgroup.glsl"
shared float tail_sum[TAIL_THREADS];

// Row 0: res += add, then its norm into out_ and (xq != 0) the 8-bit copy, in the order and
// rounding of rms_norm.comp. width % 32 == 0; a thread takes whole blocks of 32.
void tail_norm(Floats res, Floats add, Floats weight, Floats out_, Words xq, Floats xds, uint width, float eps) {
    uint t = gl_LocalInvocationIndex, blocks = width / 32u;
    Vec4f x4 = Vec4f(uint64_t(res)), w4 = Vec4f(uint64_t(weight)), o4 = Vec4f(uint64_t(out_));
    CoherentVec4f a4 = CoherentVec4f(uint64_t(add));
    float s = 0.0;
    for (uint b = t; b < blocks; b += TAIL_THREADS) {
        vec4 v[8];
        [[unroll]] for (uint j = 0u; j < 8u; j++) v[j] = x4.v[8u * b + j] + a4.v[8u * b + j];
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            x4.v[8u * b + j] = v[j];
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                precise float sq = v[j][e] * v[j][e];
                s += sq;
            }
        }
    }
    tail_sum[t] = s;
    barrier();
    for (uint k = TAIL_THREADS / 2u; k > 0u; k >>= 1) {
        if (t < k) tail_sum[t] += tail_sum[t + k];
        barrier();
    }
    precise float ms = div_rn(tail_sum[0], float(width)) + eps;
    float scale = div_rn(1.0, sqrt_rn(ms));
    for (uint b = t; b < blocks; b += TAIL_THREADS) {
        float y[32];
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            vec4 v = x4.v[8u * b + j], g = w4.v[8u * b + j];
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                precise float ye = v[e] * scale * g[e];
                y[4u * j + e] = ye;
            }
            o4.v[8u * b + j] = vec4(y[4u * j], y[4u * j + 1u], y[4u * j + 2u], y[4u * j + 3u]);
        }
        if (uint64_t(xq) != 0ul) store_q8_block(y, xq, xds, b);
    }
}
#endif
