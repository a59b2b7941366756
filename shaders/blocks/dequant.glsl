// Element `i` of a weight row in GGUF block format, for the type given by TYPE (a ggml type
// id; IQ4_NL and IQ4_XS included). `rb` is the row's byte offset from `w`. Every tensor type of the CPU tier is here; the
// formulas follow the block layouts in zinc-formats' reference dequantizer, with the
// 32-element formats' blocks in the device's groups of eight (block_layout.glsl).
#include "blocks/block_layout.glsl"

#if TYPE == 0 // F32
float dq(Words w, uint rb, uint i) { return uintBitsToFloat(w.v[(rb >> 2) + i]); }
#elif TYPE == 1 // F16
float dq(Words w, uint rb, uint i) { return rd_f16(w, rb + 2u * i); }
#elif TYPE == 30 // BF16
float dq(Words w, uint rb, uint i) { return uintBitsToFloat(rd_u16(w, rb + 2u * i) << 16); }
#elif TYPE == 2 // Q4_0: f16 d, 16 bytes of nibbles
float dq(Words w, uint rb, uint i) {
    uint b = i >> 5, j = i & 31u;
    uint q = rd_u8(w, qs_at(rb, b) + (j & 15u));
    q = j < 16u ? q & 15u : q >> 4;
    return (float(q) - 8.0) * rd_f16(w, sc_at(rb, b));
}
#elif TYPE == 3 // Q4_1: f16 d, f16 m, 16 bytes of nibbles
float dq(Words w, uint rb, uint i) {
    uint b = i >> 5, j = i & 31u;
    uint q = rd_u8(w, qs_at(rb, b) + (j & 15u));
    q = j < 16u ? q & 15u : q >> 4;
    return float(q) * rd_f16(w, sc_at(rb, b)) + rd_f16(w, sc_at(rb, b) + 2u);
}
#elif TYPE == 6 || TYPE == 7 // Q5_0 / Q5_1: f16 d, [f16 m], 32 high bits, 16 bytes of nibbles
float dq(Words w, uint rb, uint i) {
    uint b = i >> 5, j = i & 31u;
    uint q = rd_u8(w, qs_at(rb, b) + (j & 15u));
    q = j < 16u ? q & 15u : q >> 4;
    q |= ((w.v[qh_at(rb, b) >> 2] >> j) & 1u) << 4;
#if TYPE == 6
    return (float(q) - 16.0) * rd_f16(w, sc_at(rb, b));
#else
    return float(q) * rd_f16(w, sc_at(rb, b)) + rd_f16(w, sc_at(rb, b) + 2u);
#endif
}
#elif TYPE == 8 // Q8_0: f16 d, 32 signed bytes
float dq(Words w, uint rb, uint i) {
    uint b = i >> 5;
    return float(sext8(rd_u8(w, qs_at(rb, b) + (i & 31u)))) * rd_f16(w, sc_at(rb, b));
}
#elif TYPE == 10 // Q2_K: 16 scale bytes, 64 bytes of 2-bit values; f16 d, f16 dmin (grouped)
float dq(Words w, uint rb, uint i) {
    uint b = kbody_at(rb, i >> 8), f = kfactors_at(rb, i >> 8), r = i & 255u;
    uint n = r >> 7, shift = ((r >> 5) & 3u) * 2u, half_ = (r >> 4) & 1u, l = r & 15u;
    uint sc = rd_u8(w, b + n * 8u + ((r >> 5) & 3u) * 2u + half_);
    uint q = (rd_u8(w, b + 16u + n * 32u + l + 16u * half_) >> shift) & 3u;
    return rd_f16(w, f) * float(sc & 15u) * float(q) - rd_f16(w, f + 2u) * float(sc >> 4);
}
#elif TYPE == 11 // Q3_K: 32 bytes high-bit mask, 64 bytes of 2-bit values; 12 bytes of 6-bit scales, f16 d (grouped)
float dq(Words w, uint rb, uint i) {
    uint b = kbody_at(rb, i >> 8), f = kfactors_at(rb, i >> 8), r = i & 255u;
    uint n = r >> 7, j = (r >> 5) & 3u, half_ = (r >> 4) & 1u, l = r & 15u;
    uint is = n * 8u + j * 2u + half_, qi = l + 16u * half_;
    uint low = is < 8u ? rd_u8(w, f + is) & 15u : rd_u8(w, f + is - 8u) >> 4;
    uint high = (rd_u8(w, f + 8u + (is & 3u)) >> (2u * (is >> 2))) & 3u;
    int scale = int(low | (high << 4)) - 32;
    int q = int((rd_u8(w, b + 32u + n * 32u + qi) >> (2u * j)) & 3u);
    if ((rd_u8(w, b + qi) & (1u << (n * 4u + j))) == 0u) q -= 4;
    return rd_f16(w, f + 12u) * float(scale) * float(q);
}
#elif TYPE == 12 || TYPE == 13 // Q4_K / Q5_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, [32 high-bit bytes], nibbles
float dq(Words w, uint rb, uint i) {
#if TYPE == 12
    const uint size = 144u, qs_at = 16u;
#else
    const uint size = 176u, qs_at = 48u;
#endif
    uint b = rb + (i >> 8) * size, r = i & 255u;
    // Quants in sub-block order (block_layout/sub_blocks.rs): sub-block j's 16 bytes at 16·j,
    // value e in the low nibble of byte e, or the high one of byte e − 16; Q5_K's fifth bit e
    // of word j.
    uint j = r >> 5, e = r & 31u;
    uint sc, mn;
    if (j < 4u) {
        sc = rd_u8(w, b + 4u + j) & 63u;
        mn = rd_u8(w, b + 8u + j) & 63u;
    } else {
        sc = (rd_u8(w, b + 8u + j) & 15u) | ((rd_u8(w, b + j) >> 6) << 4);
        mn = (rd_u8(w, b + 8u + j) >> 4) | ((rd_u8(w, b + 4u + j) >> 6) << 4);
    }
    uint q = rd_u8(w, b + qs_at + 16u * j + (e & 15u));
    q = e < 16u ? q & 15u : q >> 4;
#if TYPE == 13
    q |= ((w.v[(b + 16u + 4u * j) >> 2] >> e) & 1u) << 4;
#endif
    return rd_f16(w, b) * float(sc) * float(q) - rd_f16(w, b + 2u) * float(mn);
}
#elif TYPE == 14 // Q6_K: 128 bytes low nibbles, 64 bytes high 2 bits, 16 signed scales; f16 d (grouped, quants in sub-block order)
float dq(Words w, uint rb, uint i) {
    uint b = kbody_at(rb, i >> 8), r = i & 255u;
    // Sub-block j's low nibbles at 16·j (value e low in byte e, or high in byte e − 16), its
    // high bits at 128 + 8·j: bits 2k of byte (e & 3) of the first word for value 4k + (e & 3),
    // of the second for 16 + 4k + (e & 3) (block_layout/sub_blocks.rs).
    uint j = r >> 5, e = r & 31u, n = j >> 2, quarter = j & 3u;
    uint lo = rd_u8(w, b + 16u * j + (e & 15u));
    lo = e < 16u ? lo & 15u : lo >> 4;
    uint hi = (rd_u8(w, b + 128u + 8u * j + 4u * (e >> 4) + (e & 3u)) >> (2u * ((e & 15u) >> 2))) & 3u;
    int sc = sext8(rd_u8(w, b + 192u + 8u * n + (e >> 4) + 2u * quarter));
    return rd_f16(w, kfactors_at(rb, i >> 8)) * float(sc) * float(int(lo | (hi << 4)) - 32);
}
#elif TYPE == 15 // Q8_K: f32 d, 256 signed bytes, 16 sums
float dq(Words w, uint rb, uint i) {
    uint b = rb + (i >> 8) * 292u;
    return uintBitsToFloat(w.v[b >> 2]) * float(sext8(rd_u8(w, b + 4u + (i & 255u))));
}
#elif TYPE == 20 || TYPE == 23 // IQ4_NL: f16 d, 16 bytes of 4-bit indices (grouped as Q4_0); IQ4_XS: d and 6-bit scales, 128 bytes of indices (grouped as Q6_K)
const float IQ4_VALUES[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
float dq(Words w, uint rb, uint i) {
    uint j = i & 31u;
#if TYPE == 20
    uint b = i >> 5, qs = qs_at(rb, b);
    float d = rd_f16(w, sc_at(rb, b));
#else
    uint s = i >> 8, ib = (i >> 5) & 7u, f = kfactors_at(rb, s), qs = kbody_at(rb, s) + 16u * ib;
    uint low = (rd_u8(w, f + 4u + ib / 2u) >> (4u * (ib & 1u))) & 15u;
    uint high = (rd_u16(w, f + 2u) >> (2u * ib)) & 3u;
    float d = rd_f16(w, f) * float(int(low | (high << 4)) - 32);
#endif
    uint q = rd_u8(w, qs + (j & 15u));
    return d * IQ4_VALUES[j < 16u ? q & 15u : q >> 4];
}
#else
#error "unsupported TYPE"
#endif
