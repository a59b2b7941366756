// Where the parts of a 32-element block lie in a weight row on the device. weights.rs uploads
// rows of Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 split by part: every block's quantized values first
// (16 bytes, or 32 for Q8_0), then every block's 32 high bits (Q5_x), then every block's
// scale (f16 d, or d and m as one word), each row starting on a 16-byte boundary. A block's
// values are then one aligned 16-byte load, and a subgroup reading consecutive blocks reads
// consecutive memory; in the file's layout (18 bytes for Q4_0) a block took six word loads.
// Needs TYPE (a ggml type id) defined.
#if TYPE == 8
#define QS_BYTES 32u
#else
#define QS_BYTES 16u
#endif
#if TYPE == 6 || TYPE == 7
#define QH_BYTES 4u
#else
#define QH_BYTES 0u
#endif
#if TYPE == 3 || TYPE == 7
#define SC_BYTES 4u
#else
#define SC_BYTES 2u
#endif

// Byte offsets of block b's parts in the row at byte `rb` of a matrix with `nb` blocks per row.
uint qs_at(uint rb, uint b) { return rb + QS_BYTES * b; }
uint qh_at(uint rb, uint nb, uint b) { return rb + QS_BYTES * nb + 4u * b; }
uint sc_at(uint rb, uint nb, uint b) { return rb + (QS_BYTES + QH_BYTES) * nb + SC_BYTES * b; }

// Block b's scale d and offset m (m is 0 for the types without one).
vec2 block_scales(Words w, uint rb, uint nb, uint b) {
#if TYPE == 3 || TYPE == 7
    return unpackHalf2x16(w.v[sc_at(rb, nb, b) >> 2]);
#else
    return vec2(rd_f16(w, sc_at(rb, nb, b)), 0.0);
#endif
}

// Block b's 32 high bits (Q5_x).
uint block_qh(Words w, uint rb, uint nb, uint b) { return w.v[qh_at(rb, nb, b) >> 2]; }

// Word `i` of block b's quantized values (0..3, or 0..7 for Q8_0).
uint block_qs_word(Words w, uint rb, uint b, uint i) { return w.v[(qs_at(rb, b) >> 2) + i]; }
