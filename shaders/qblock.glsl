// One 32-element weight block of a GGUF format (TYPE: 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0)
// read as whole words and unpacked to eight words of 8-bit values in the activation blocks'
// order (values 0..15, then 16..31), with its scale and, for Q4_1 / Q5_1, its offset. The
// read and the unpacking are separate so that a kernel can issue the next block's read
// before it works on the current one. Needs common.glsl.

// The high bits of four Q5 values (bits 0..3 of `h`) moved to bit 4 of each byte.
uint spread4(uint h) { return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25); }

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

// Words of a whole block from its first byte; a block may start two bytes into a word, so
// one more word is read (RawBlock) and the pairs are funnel-shifted.
#if TYPE == 2
#define BLOCK_WORDS 5u
#elif TYPE == 3 || TYPE == 6
#define BLOCK_WORDS 6u
#elif TYPE == 7
#define BLOCK_WORDS 7u
#else
#define BLOCK_WORDS 9u
#endif

struct RawBlock { uint w[BLOCK_WORDS + 1u]; bool odd; };
struct WBlock { uint q[8]; float d; float m; };

// The words holding the block at byte `off` (even).
RawBlock load_raw(Words w, uint off) {
    RawBlock r;
    uint w0 = off >> 2;
    [[unroll]] for (uint i = 0u; i <= BLOCK_WORDS; i++) r.w[i] = w.v[w0 + i];
    r.odd = (off & 2u) != 0u;
    return r;
}

WBlock unpack_block(RawBlock raw) {
    uint bw[BLOCK_WORDS];
    [[unroll]] for (uint i = 0u; i < BLOCK_WORDS; i++)
        bw[i] = raw.odd ? (raw.w[i] >> 16) | (raw.w[i + 1u] << 16) : raw.w[i];
    WBlock r;
    r.d = unpackHalf2x16(bw[0]).x;
    r.m = unpackHalf2x16(bw[0]).y;
#if TYPE == 8
    [[unroll]] for (uint k = 0u; k < 8u; k++) r.q[k] = (bw[k] >> 16) | (bw[k + 1u] << 16);
#else
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
#if TYPE == 2
        uint qw = (bw[k] >> 16) | (bw[k + 1u] << 16);
#elif TYPE == 3
        uint qw = bw[k + 1u];
#elif TYPE == 6
        uint qw = (bw[k + 1u] >> 16) | (bw[k + 2u] << 16);
#else
        uint qw = bw[k + 2u];
#endif
        uint lo = qw & 0x0f0f0f0fu, hi = (qw >> 4) & 0x0f0f0f0fu;
#if TYPE == 6
        uint qh = (bw[0] >> 16) | (bw[1] << 16);
#elif TYPE == 7
        uint qh = bw[1];
#endif
#if TYPE == 6 || TYPE == 7
        lo |= spread4(qh >> (4u * k));
        hi |= spread4(qh >> (16u + 4u * k));
#endif
        r.q[k] = lo;
        r.q[4u + k] = hi;
    }
#endif
    return r;
}

WBlock load_block(Words w, uint off) { return unpack_block(load_raw(w, off)); }
