// One 32-element weight block of a GGUF format (TYPE: 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0,
// 20 IQ4_NL (signed values from its table), and 10 Q2_K, 11 Q3_K, 12 Q4_K, 13 Q5_K, 14 Q6_K,
// 23 IQ4_XS, whose 256-element super-blocks are read as eight blocks of 32) from the device's layout (block_layout.glsl), unpacked to eight words of 8-bit values in
// the activation blocks' order (values 0..15, then 16..31), with its scale and, for Q4_1 /
// Q5_1 / Q2_K / Q4_K / Q5_K, its offset (Q2_K: scale and offset per 16 values, kblock.glsl). The read and the unpacking are separate so that a kernel
// can issue the next block's read before it works on the current one. Needs common.glsl.

// The high bits of four Q5 values (bits 0..3 of `h`) moved to bit 4 of each byte.
uint spread4(uint h) { return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25); }

#include "blocks/block_layout.glsl"

#if TYPE == 20 || TYPE == 23
// IQ4's 16 values (ggml's kvalues_iq4nl) as signed bytes, four to a word. Chosen by selects,
// not by indexing a constant array: a dynamically indexed array lives in local memory.
uint iq4_value(uint i) {
    uint w = (i & 8u) != 0u ? ((i & 4u) != 0u ? 0x71594535u : 0x26190d01u)
                            : ((i & 4u) != 0u ? 0xf6eaddcfu : 0xbfad9881u);
    return (w >> (8u * (i & 3u))) & 0xffu;
}
// Four 4-bit indices (one per byte of `w`) replaced by the signed bytes they stand for.
uint iq4_map(uint w) {
    return iq4_value(w & 15u) | (iq4_value((w >> 8) & 15u) << 8) | (iq4_value((w >> 16) & 15u) << 16)
        | (iq4_value((w >> 24) & 15u) << 24);
}
#endif

#if TYPE == 10 || TYPE == 11 || TYPE == 12 || TYPE == 13 || TYPE == 14 || TYPE == 23
#include "blocks/kblock.glsl"
#else
// A block's stored fields, read with one 16-byte load per 16 quant bytes.
struct RawBlock { uvec4 qs[QS_BYTES / 16u]; uint qh; uint sc; };
struct WBlock { uint q[8]; float d; float m; };

// The fields of block `b` of the row at byte `row` (a multiple of 16).
RawBlock load_raw(Words w, uint row, uint b) {
    RawBlock r;
    Vec4s v = Vec4s(uint64_t(w));
    uint qs = qs_at(row, b) >> 4;
    [[unroll]] for (uint i = 0u; i < QS_BYTES / 16u; i++) r.qs[i] = v.v[qs + i];
    r.qh = QH_BYTES != 0u ? w.v[qh_at(row, b) >> 2] : 0u;
    // Two-byte scales share a word with a neighbour's: shift this block's to the low half.
    uint sw = w.v[sc_at(row, b) >> 2];
    r.sc = SC_BYTES == 2u ? sw >> (16u * (b & 1u)) : sw;
    return r;
}

WBlock unpack_block(RawBlock raw) {
    WBlock r;
    r.d = unpackHalf2x16(raw.sc).x;
    // Only Q4_1 and Q5_1 store an offset; the others' upper half is a neighbour's scale.
    r.m = SC_BYTES == 4u ? unpackHalf2x16(raw.sc).y : 0.0;
#if TYPE == 8
    r.q = uint[8](raw.qs[0].x, raw.qs[0].y, raw.qs[0].z, raw.qs[0].w, raw.qs[1].x, raw.qs[1].y, raw.qs[1].z, raw.qs[1].w);
#else
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint qw = raw.qs[0][k];
        uint lo = qw & 0x0f0f0f0fu, hi = (qw >> 4) & 0x0f0f0f0fu;
#if TYPE == 6 || TYPE == 7
        lo |= spread4(raw.qh >> (4u * k));
        hi |= spread4(raw.qh >> (16u + 4u * k));
#endif
#if TYPE == 20
        lo = iq4_map(lo);
        hi = iq4_map(hi);
#endif
        r.q[k] = lo;
        r.q[4u + k] = hi;
    }
#endif
    return r;
}
#endif

WBlock load_block(Words w, uint row, uint b) { return unpack_block(load_raw(w, row, b)); }
