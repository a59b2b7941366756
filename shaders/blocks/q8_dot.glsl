// Integer dot products of 32-element blocks: packed 4×8-bit words (INT_DOT=1 uses the
// device's dot product instruction), and one unpacked weight block (qblock.glsl) against one
// 8-bit activation block with the format's scale and offset terms, as the CPU tier sums them.
// Include after qblock.glsl.
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

// An unpacked weight block · one activation block (xa: values 0..15, xb: 16..31; ds: its
// scale d and d·Σq).
float block_dot(WBlock b, uvec4 xa, uvec4 xb, vec2 ds) {
#if TYPE == 10 || TYPE == 11 || TYPE == 14
    // Q2_K, Q3_K, Q6_K: a scale per 16 values.
    int lo = dot4(b.q[0], xa.x) + dot4(b.q[1], xa.y) + dot4(b.q[2], xa.z) + dot4(b.q[3], xa.w);
    int hi = dot4(b.q[4], xb.x) + dot4(b.q[5], xb.y) + dot4(b.q[6], xb.z) + dot4(b.q[7], xb.w);
#if TYPE == 10
    // Q2_K: a minimum per 16 values too, against each half's activation sum.
    const uint ONES = 0x01010101u;
    int slo = dot4(ONES, xa.x) + dot4(ONES, xa.y) + dot4(ONES, xa.z) + dot4(ONES, xa.w);
    int shi = dot4(ONES, xb.x) + dot4(ONES, xb.y) + dot4(ONES, xb.z) + dot4(ONES, xb.w);
    return ds.x * (b.d * float(lo) + b.d2 * float(hi) + b.m * float(slo) + b.m2 * float(shi));
#else
    return ds.x * (b.d * float(lo) + b.d2 * float(hi));
#endif
#else
    int acc = dot4(b.q[0], xa.x) + dot4(b.q[1], xa.y) + dot4(b.q[2], xa.z) + dot4(b.q[3], xa.w)
        + dot4(b.q[4], xb.x) + dot4(b.q[5], xb.y) + dot4(b.q[6], xb.z) + dot4(b.q[7], xb.w);
#if TYPE == 2
    return b.d * (ds.x * float(acc) - 8.0 * ds.y);
#elif TYPE == 6
    return b.d * (ds.x * float(acc) - 16.0 * ds.y);
#elif TYPE == 8 || TYPE == 20 || TYPE == 23 // signed values, no offset
    return b.d * ds.x * float(acc);
#else // Q4_1, Q5_1, Q4_K, Q5_K
    return b.d * ds.x * float(acc) + b.m * ds.y;
#endif
#endif
}
