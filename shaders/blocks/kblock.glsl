// K-quant weights (TYPE: 10 Q2_K, 11 Q3_K, 12 Q4_K, 13 Q5_K, 14 Q6_K; and 23 IQ4_XS) read as
// 32-element blocks for the 8-bit activation kernels: block `b` of a row is sub-block `b & 7` of
// super-block `b >> 3`. Each unpacks to the eight words of WBlock (qblock.glsl) with its float
// scales and offsets, so that every kernel that dots 32-element blocks dots K-quants too:
//   Q4_K, Q5_K: unsigned values 0..15 (0..31), d = d·scale, m = −dmin·min of the sub-block;
//   Q2_K: unsigned values 0..3, a scale and a minimum per 16: d, m for values 0..15, d2, m2
//         for 16..31;
//   Q3_K, Q6_K: signed values (q − 4, q − 32), d for values 0..15 and d2 for 16..31 (their
//         scales are per 16);
//   IQ4_XS: signed values from the IQ4 table (qblock.glsl), d = d·(scale − 32), d2 = d.
// Q4_K, Q5_K and Q6_K quants are in sub-block order on the device (block_layout/sub_blocks.rs):
// a sub-block reads its own 16 bytes of nibbles (Q4_0's order), Q5_K its word of fifth bits and
// Q6_K its 8 bytes of high bits. Q2_K and Q3_K sub-blocks share their 32 bytes of 2-bit fields
// (and Q3_K's high bits) with neighbours, so such a block reads 32 bytes of each and keeps its
// part; neighbouring threads read the same lines. Included by qblock.glsl.

// A sub-block's stored fields: its 32 bytes of (low) quants, its 32 bytes of high bits (Q3_K,
// Q5_K, Q6_K), its scale fields (Q4_K / Q5_K: the super-block's first 16 bytes, d, dmin and
// the 12 scale bytes; Q6_K: the word of its two scales and its super-block's d; Q2_K: its two
// scale bytes and the word of d and dmin; Q3_K: its two low-nibble scale bytes, its two
// high-bit scale bytes and d), and which sub-block it is.
struct RawBlock { uvec4 ql[2]; uvec4 qh[2]; uvec4 head; uint sub; };
#if TYPE == 10
struct WBlock { uint q[8]; float d; float m; float d2; float m2; };
#else
struct WBlock { uint q[8]; float d; float m; float d2; };
#endif

RawBlock load_raw(Words w, uint row, uint b) {
    RawBlock r;
    Vec4s v = Vec4s(uint64_t(w));
    uint s = b >> 3, j = b & 7u;
    r.sub = j;
#if TYPE == 10 || TYPE == 11
    // Sub-block j's 32 quant bytes are those of its half (j >> 2), shifted by 2·(j & 3).
    uint body = kbody_at(row, s), f = kfactors_at(row, s);
#if TYPE == 10
    uint ql = (body + 16u + 32u * (j >> 2)) >> 4;
    r.qh[0] = uvec4(0u);
    r.qh[1] = uvec4(0u);
    r.head = uvec4(w.v[(body + 2u * j) >> 2] >> (16u * (j & 1u)), w.v[f >> 2], 0u, 0u);
#else
    uint ql = (body + 32u + 32u * (j >> 2)) >> 4;
    r.qh[0] = v.v[body >> 4];
    r.qh[1] = v.v[(body >> 4) + 1u];
    // Scales 2j and 2j + 1: low nibbles in bytes 2·(j & 3) and + 1 (shifted by 4·(j >> 2)),
    // high bits in bytes 8 + 2·(j & 1) and + 1 (shifted by 2·(j >> 1)); then d.
    r.head = uvec4(rd_u16(w, f + 2u * (j & 3u)), rd_u16(w, f + 8u + 2u * (j & 1u)), rd_u16(w, f + 12u), 0u);
#endif
    r.ql[0] = v.v[ql];
    r.ql[1] = v.v[ql + 1u];
#elif TYPE == 23
    // The sub-block's 16 bytes of indices (32 values) and its super-block's 8 header bytes.
    r.ql[0] = v.v[(kbody_at(row, s) >> 4) + j];
    r.ql[1] = uvec4(0u);
    r.qh[0] = uvec4(0u);
    r.qh[1] = uvec4(0u);
    uint f = kfactors_at(row, s) >> 2;
    r.head = uvec4(w.v[f], w.v[f + 1u], 0u, 0u);
#elif TYPE == 14
    // The sub-block's 16 bytes of low nibbles, its 8 bytes of high bits, its two scales (bytes
    // 2j and 2j + 1 of 16) and its super-block's d.
    uint body = kbody_at(row, s), d_at = kfactors_at(row, s);
    r.ql[0] = v.v[(body >> 4) + j];
    r.ql[1] = uvec4(0u);
    r.qh[0] = uvec4(UVec2s(uint64_t(w)).v[((body + 128u) >> 3) + j], 0u, 0u);
    r.qh[1] = uvec4(0u);
    r.head = uvec4(w.v[(body + 192u + 2u * j) >> 2] >> (16u * (j & 1u)), w.v[d_at >> 2] >> (8u * (d_at & 2u)), 0u, 0u);
#else
#if TYPE == 12
    const uint size = 144u, qs_off = 16u;
#else
    const uint size = 176u, qs_off = 48u;
#endif
    // The sub-block's 16 bytes of nibbles, Q5_K's word of fifth bits, and the super-block's
    // first 16 bytes (d, dmin, the 12 scale bytes).
    uint base = row + s * size;
    r.ql[0] = v.v[((base + qs_off) >> 4) + j];
    r.ql[1] = uvec4(0u);
#if TYPE == 13
    r.qh[0] = uvec4(w.v[((base + 16u) >> 2) + j], 0u, 0u, 0u);
#else
    r.qh[0] = uvec4(0u);
#endif
    r.qh[1] = uvec4(0u);
    r.head = v.v[base >> 4];
#endif
    return r;
}

WBlock unpack_block(RawBlock raw) {
    WBlock r;
    uint j = raw.sub;
    uint lo[8] = uint[8](raw.ql[0].x, raw.ql[0].y, raw.ql[0].z, raw.ql[0].w, raw.ql[1].x, raw.ql[1].y, raw.ql[1].z, raw.ql[1].w);
    uint hi[8] = uint[8](raw.qh[0].x, raw.qh[0].y, raw.qh[0].z, raw.qh[0].w, raw.qh[1].x, raw.qh[1].y, raw.qh[1].z, raw.qh[1].w);
#if TYPE == 10 || TYPE == 11
    uint sh = 2u * (j & 3u);
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        uint u = (lo[i] >> sh) & 0x03030303u;
#if TYPE == 11
        // Q3_K: u | high bit << 2, minus 4 where the high bit is clear (bytes 0xfc..0xff).
        u |= ((hi[i] >> j) & 0x01010101u) << 2;
        u = (u & 0x03030303u) | (((~u >> 2) & 0x01010101u) * 0xfcu);
#endif
        r.q[i] = u;
    }
#if TYPE == 10
    // head.x: scale bytes 2j and 2j + 1 (scale in the low nibble, minimum in the high one).
    vec2 dm = unpackHalf2x16(raw.head.y);
    r.d = dm.x * float(raw.head.x & 15u);
    r.d2 = dm.x * float((raw.head.x >> 8) & 15u);
    r.m = -dm.y * float((raw.head.x >> 4) & 15u);
    r.m2 = -dm.y * float((raw.head.x >> 12) & 15u);
#else
    uint lsh = 4u * (j >> 2), hsh = 2u * (j >> 1);
    uint s0 = ((raw.head.x >> lsh) & 15u) | (((raw.head.y >> hsh) & 3u) << 4);
    uint s1 = ((raw.head.x >> (8u + lsh)) & 15u) | (((raw.head.y >> (8u + hsh)) & 3u) << 4);
    float d = unpackHalf2x16(raw.head.z).x;
    r.d = d * float(int(s0) - 32);
    r.d2 = d * float(int(s1) - 32);
    r.m = 0.0;
#endif
#elif TYPE == 23
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        r.q[k] = iq4_map(lo[k] & 0x0f0f0f0fu);
        r.q[4u + k] = iq4_map((lo[k] >> 4) & 0x0f0f0f0fu);
    }
    // head.x: f16 d, then 16 bits of high scale bits (two per sub-block); head.y: low nibbles.
    uint ls = ((raw.head.y >> (4u * j)) & 15u) | (((raw.head.x >> (16u + 2u * j)) & 3u) << 4);
    r.d = unpackHalf2x16(raw.head.x).x * float(int(ls) - 32);
    r.d2 = r.d;
    r.m = 0.0;
#elif TYPE == 14
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        // Values 4k..4k+3 (low nibbles of word k, high bits 2k of the first high word) and
        // 16 + 4k.. (high nibbles, the second word), each q − 32 per byte (q < 64): bits 0..4
        // kept, bits 5..7 set where bit 5 was clear.
        uint a = (lo[k] & 0x0f0f0f0fu) | (((raw.qh[0].x >> (2u * k)) & 0x03030303u) << 4);
        uint b = ((lo[k] >> 4) & 0x0f0f0f0fu) | (((raw.qh[0].y >> (2u * k)) & 0x03030303u) << 4);
        r.q[k] = (a & 0x1f1f1f1fu) | (((~a >> 5) & 0x01010101u) * 0xe0u);
        r.q[4u + k] = (b & 0x1f1f1f1fu) | (((~b >> 5) & 0x01010101u) * 0xe0u);
    }
    float d = unpackHalf2x16(raw.head.y).x;
    r.d = d * float(sext8(raw.head.x));
    r.d2 = d * float(sext8(raw.head.x >> 8));
    r.m = 0.0;
#else
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        r.q[k] = lo[k] & 0x0f0f0f0fu;
        r.q[4u + k] = (lo[k] >> 4) & 0x0f0f0f0fu;
#if TYPE == 13
        r.q[k] |= spread4(raw.qh[0].x >> (4u * k));
        r.q[4u + k] |= spread4(raw.qh[0].x >> (16u + 4u * k));
#endif
    }
    // The 6-bit scale and minimum of sub-block j from the 12 scale bytes (head.y, .z, .w).
    uint sh = 8u * (j & 3u), sc, mn;
    if (j < 4u) {
        sc = (raw.head.y >> sh) & 63u;
        mn = (raw.head.z >> sh) & 63u;
    } else {
        sc = ((raw.head.w >> sh) & 15u) | (((raw.head.y >> sh) >> 6 & 3u) << 4);
        mn = ((raw.head.w >> sh) >> 4 & 15u) | (((raw.head.z >> sh) >> 6 & 3u) << 4);
    }
    vec2 dm = unpackHalf2x16(raw.head.x);
    r.d = dm.x * float(sc);
    r.d2 = r.d;
    r.m = -dm.y * float(mn);
#endif
    return r;
}
