#version 450
// Weight (32-element GGUF formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) × activation rows quantized
// to 8 bits in blocks of 32 (quantize_q8.comp), with integer multiply-adds per block as the
// CPU tier does. INT_DOT=1 uses the device's packed 4×8-bit dot product instruction.
#if INT_DOT
#extension GL_EXT_integer_dot_product : require
int dot4(uint a, uint b) { return dotPacked4x8EXT(int(a), int(b)); }
#else
int dot4(uint a, uint b) {
    ivec4 x = ivec4(int(a << 24) >> 24, int(a << 16) >> 24, int(a << 8) >> 24, int(a) >> 24);
    ivec4 y = ivec4(int(b << 24) >> 24, int(b << 16) >> 24, int(b << 8) >> 24, int(b) >> 24);
    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
}
#endif
#include "common.glsl"
#include "matmul_common.glsl"

// The high bits of four Q5 values (bits 0..3 of `h`) moved to bit 4 of each byte.
uint spread4(uint h) { return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25); }

// Quarter `q` (0..3) of one weight block · the matching part of one activation block (8
// words of int8 at `xw`, scale da, da·Σq = sa). Four threads share a block, so a subgroup
// reads whole runs of consecutive blocks. The block's offset term is added by quarter 0.
float part_dot(Words w, uint b, uint q, uint xw, float da, float sa) {
#if TYPE == 8
    int acc = dot4(rd_u32_even(w, b + 2u + 8u * q), p.xq.v[xw + 2u * q])
        + dot4(rd_u32_even(w, b + 6u + 8u * q), p.xq.v[xw + 2u * q + 1u]);
    return rd_f16(w, b) * da * float(acc);
#else
#if TYPE == 2
    const uint qs_at = 2u;
#elif TYPE == 3
    const uint qs_at = 4u;
#elif TYPE == 6
    const uint qs_at = 6u;
#elif TYPE == 7
    const uint qs_at = 8u;
#endif
    uint qw = rd_u32_even(w, b + qs_at + 4u * q);
    uint lo = qw & 0x0f0f0f0fu, hi = (qw >> 4) & 0x0f0f0f0fu;
#if TYPE == 6 || TYPE == 7
    uint qh = rd_u32_even(w, b + qs_at - 4u);
    lo |= spread4(qh >> (4u * q));
    hi |= spread4(qh >> (16u + 4u * q));
#endif
    int acc = dot4(lo, p.xq.v[xw + q]) + dot4(hi, p.xq.v[xw + 4u + q]);
    float d = rd_f16(w, b);
#if TYPE == 2
    return d * da * float(acc) - (q == 0u ? d * 8.0 * sa : 0.0);
#elif TYPE == 6
    return d * da * float(acc) - (q == 0u ? d * 16.0 * sa : 0.0);
#else
    return d * da * float(acc) + (q == 0u ? rd_f16(w, b + 2u) * sa : 0.0);
#endif
#endif
}

#if TYPE == 2
const uint BLOCK_BYTES = 18u;
#elif TYPE == 3
const uint BLOCK_BYTES = 20u;
#elif TYPE == 6
const uint BLOCK_BYTES = 22u;
#elif TYPE == 7
const uint BLOCK_BYTES = 24u;
#elif TYPE == 8
const uint BLOCK_BYTES = 34u;
#endif

// One activation row against one weight row (`wm`, `rb`): decode, and every expert product.
// A single row is bound by memory latency, not bandwidth, unless each thread keeps several
// loads in flight: four blocks per iteration, branch-free (blocks past the end read the last
// block and count zero), so all their loads issue before the first multiply.
float single_row(Words wm, uint rb, uint xr, uint nb, uint t, uint q) {
    const uint BPI = TPR / 4u;
    float a = 0.0;
    uint b = t >> 2;
    for (; b < nb; b += 4u * BPI) {
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint bb = min(b + u * BPI, nb - 1u);
            float keep = b + u * BPI < nb ? 1.0 : 0.0;
            vec2 ds = vec2(p.x.v[2u * (xr * nb + bb)], p.x.v[2u * (xr * nb + bb) + 1u]);
            a += keep * part_dot(wm, rb + bb * BLOCK_BYTES, q, xr * (p.k / 4u) + 8u * bb, ds.x, ds.y);
        }
    }
    return a;
}

void main() {
    uint o = out_feature(), t = lane(), q = t & 3u;
    // Threads past the last feature still take part in the barrier, with nothing to add.
    uint nb = o < p.n_out ? p.k / 32u : 0u;
    float acc[ROWS] = float[ROWS](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    uint rb = min(o, p.n_out - 1u) * p.row_bytes;
    if (p.mode == 0u && p.n_rows > 1u) {
        uint r0 = gl_WorkGroupID.y * ROWS, n = min(ROWS, p.n_rows - r0);
        for (uint b = t >> 2; b < nb; b += TPR / 4u) {
            // Constant bounds keep acc[] in registers (a bound of n would index it at run
            // time, which spills it to memory on some compilers).
            for (uint j = 0u; j < ROWS; j++) {
                if (j < n) {
                    uint xr = r0 + j;
                    vec2 ds = vec2(p.x.v[2u * (xr * nb + b)], p.x.v[2u * (xr * nb + b) + 1u]);
                    acc[j] += part_dot(p.w, rb + b * BLOCK_BYTES, q, xr * (p.k / 4u) + 8u * b, ds.x, ds.y);
                }
            }
        }
        reduce_and_store(acc, o, r0, n);
    } else {
        uint r = gl_WorkGroupID.y;
        Words wm = p.mode == 0u ? p.w : expert_matrix(r);
        acc[0] = single_row(wm, rb, p.mode == 0u ? r : input_row(r), nb, t, q);
        reduce_and_store(acc, o, r, 1u);
    }
}
