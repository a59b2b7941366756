// K-quant weights (TYPE: 12 Q4_K, 13 Q5_K, 14 Q6_K; and 23 IQ4_XS) read as 32-element blocks for the 8-bit
// activation kernels: block `b` of a row is sub-block `b & 7` of super-block `b >> 3`. Each
// unpacks to the eight words of WBlock (qblock.glsl) with its float scale and offset, so that
// every kernel that dots 32-element blocks dots K-quants too:
//   Q4_K, Q5_K: unsigned values 0..15 (0..31), d = d·scale, m = −dmin·min of the sub-block;
//   Q6_K: signed values q − 32, d for values 0..15 and d2 for 16..31 (its scales are per 16);
//   IQ4_XS: signed values from the IQ4 table (qblock.glsl), d = d·(scale − 32), d2 = d.
// A sub-block's quant bytes share their 32 bytes with a neighbour's (Q4_K / Q5_K nibbles,
// Q6_K's low nibbles and high bits), so a block reads 32 bytes of each and keeps its part;
// neighbouring threads read the same lines. Included by qblock.glsl.

// A sub-block's stored fields: its 32 bytes of (low) quants, its 32 bytes of high bits (Q5_K,
// Q6_K), the super-block's first 16 bytes (Q4_K / Q5_K: d, dmin and the 12 scale bytes) or
// (Q6_K) the word of its two scales and its super-block's d, and which sub-block it is.
struct RawBlock { uvec4 ql[2]; uvec4 qh[2]; uvec4 head; uint sub; };
struct WBlock { uint q[8]; float d; float m; float d2; };

RawBlock load_raw(Words w, uint row, uint b) {
    RawBlock r;
    Vec4s v = Vec4s(uint64_t(w));
    uint s = b >> 3, j = b & 7u;
    r.sub = j;
#if TYPE == 23
    // The sub-block's 16 bytes of indices (32 values) and its super-block's 8 header bytes.
    r.ql[0] = v.v[(kbody_at(row, s) >> 4) + j];
    r.ql[1] = uvec4(0u);
    r.qh[0] = uvec4(0u);
    r.qh[1] = uvec4(0u);
    uint f = kfactors_at(row, s) >> 2;
    r.head = uvec4(w.v[f], w.v[f + 1u], 0u, 0u);
#elif TYPE == 14
    uint body = kbody_at(row, s), n = j >> 2, quarter = j & 3u;
    uint ql = (body + 64u * n + 32u * (quarter & 1u)) >> 4, qh = (body + 128u + 32u * n) >> 4;
    r.ql[0] = v.v[ql];
    r.ql[1] = v.v[ql + 1u];
    r.qh[0] = v.v[qh];
    r.qh[1] = v.v[qh + 1u];
    // The scales of sub-blocks 2j and 2j + 1 (16 values each) are bytes 2j, 2j + 1 of 16.
    uint d_at = kfactors_at(row, s);
    r.head = uvec4(w.v[(body + 192u + 2u * j) >> 2] >> (16u * (j & 1u)), w.v[d_at >> 2] >> (8u * (d_at & 2u)), 0u, 0u);
#else
#if TYPE == 12
    const uint size = 144u, qs_off = 16u;
#else
    const uint size = 176u, qs_off = 48u;
#endif
    uint base = row + s * size;
    uint ql = (base + qs_off + 32u * (j >> 1)) >> 4;
    r.ql[0] = v.v[ql];
    r.ql[1] = v.v[ql + 1u];
#if TYPE == 13
    r.qh[0] = v.v[(base >> 4) + 1u];
    r.qh[1] = v.v[(base >> 4) + 2u];
#else
    r.qh[0] = uvec4(0u);
    r.qh[1] = uvec4(0u);
#endif
    r.head = v.v[base >> 4];
#endif
    return r;
}

WBlock unpack_block(RawBlock raw) {
    WBlock r;
    uint j = raw.sub;
    uint lo[8] = uint[8](raw.ql[0].x, raw.ql[0].y, raw.ql[0].z, raw.ql[0].w, raw.ql[1].x, raw.ql[1].y, raw.ql[1].z, raw.ql[1].w);
    uint hi[8] = uint[8](raw.qh[0].x, raw.qh[0].y, raw.qh[0].z, raw.qh[0].w, raw.qh[1].x, raw.qh[1].y, raw.qh[1].z, raw.qh[1].w);
#if TYPE == 23
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
    uint quarter = j & 3u;
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        uint u = ((lo[i] >> (4u * (quarter >> 1))) & 0x0f0f0f0fu) | (((hi[i] >> (2u * quarter)) & 0x03030303u) << 4);
        // u − 32 per byte (u < 64): bits 0..4 kept, bits 5..7 set where bit 5 was clear.
        r.q[i] = (u & 0x1f1f1f1fu) | (((~u >> 5) & 0x01010101u) * 0xe0u);
    }
    float d = unpackHalf2x16(raw.head.y).x;
    r.d = d * float(sext8(raw.head.x));
    r.d2 = d * float(sext8(raw.head.x >> 8));
    r.m = 0.0;
#else
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        r.q[i] = (lo[i] >> (4u * (j & 1u))) & 0x0f0f0f0fu;
#if TYPE == 13
        r.q[i] |= ((hi[i] >> j) & 0x01010101u) << 4;
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
