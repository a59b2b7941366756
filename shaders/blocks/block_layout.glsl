// Where the fields of a 32-element block (TYPE: 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0,
// 20 IQ4_NL) lie
// on the device. Weights are uploaded in groups of eight blocks (backends/vulkan's
// block_layout.rs): the eight blocks' quant bytes, then their high-bit words (Q5 types),
// then their scales (f16 d, and f16 m for Q4_1 / Q5_1). Each block's quant bytes then start
// on a 16-byte boundary, so a row kernel reads them in one 16-byte load, and the eight scales
// of a group are adjacent. `row` is a row's byte offset (a multiple of 16), `b` a block of it.
#ifndef BLOCK_LAYOUT_GLSL
#define BLOCK_LAYOUT_GLSL
#if TYPE == 2 || TYPE == 3 || TYPE == 6 || TYPE == 7 || TYPE == 8 || TYPE == 20
#if TYPE == 8
const uint QS_BYTES = 32u;
#else
const uint QS_BYTES = 16u;
#endif
#if TYPE == 6 || TYPE == 7
const uint QH_BYTES = 4u;
#else
const uint QH_BYTES = 0u;
#endif
#if TYPE == 3 || TYPE == 7
const uint SC_BYTES = 4u;
#else
const uint SC_BYTES = 2u;
#endif
const uint BLOCK_BYTES = QS_BYTES + QH_BYTES + SC_BYTES;
const uint GROUP_BYTES = 8u * BLOCK_BYTES;

uint group_at(uint row, uint b) { return row + (b >> 3) * GROUP_BYTES; }
// Block b's quant bytes (16-byte aligned), high-bit word, and scale (f16 d, then m).
uint qs_at(uint row, uint b) { return group_at(row, b) + (b & 7u) * QS_BYTES; }
uint qh_at(uint row, uint b) { return group_at(row, b) + 8u * QS_BYTES + (b & 7u) * 4u; }
uint sc_at(uint row, uint b) { return group_at(row, b) + 8u * (QS_BYTES + QH_BYTES) + (b & 7u) * SC_BYTES; }
#endif

// Q6_K's 210-byte super-blocks would start on odd half-words, Q2_K's 84-byte, Q3_K's 110-byte
// and IQ4_XS's 136-byte ones off 16-byte boundaries. On the device eight of them form a group:
// their bodies (Q6_K: 208 bytes of low nibbles, high bits and scales; Q2_K: 16 scale bytes and
// 64 of quants; Q3_K: 32 bytes of high bits and 64 of quants; IQ4_XS: 128 bytes of quants),
// then their eight factor fields (Q6_K: f16 d; Q2_K: f16 d, dmin; Q3_K: 12 scale bytes, f16 d;
// IQ4_XS: f16 d, 16 bits of high scale bits, 4 bytes of low ones), as block_layout.rs writes
// them. Every body then starts on a 16-byte boundary. `s` is a super-block of the row at byte
// `row`.
#if TYPE == 10 || TYPE == 11 || TYPE == 14 || TYPE == 23
#if TYPE == 10
const uint K_BODY_BYTES = 80u, K_FACTOR_BYTES = 4u;
#elif TYPE == 11
const uint K_BODY_BYTES = 96u, K_FACTOR_BYTES = 14u;
#elif TYPE == 14
const uint K_BODY_BYTES = 208u, K_FACTOR_BYTES = 2u;
#else
const uint K_BODY_BYTES = 128u, K_FACTOR_BYTES = 8u;
#endif
const uint K_GROUP_BYTES = 8u * K_BODY_BYTES + ((8u * K_FACTOR_BYTES + 15u) & ~15u);
uint kbody_at(uint row, uint s) { return row + (s >> 3) * K_GROUP_BYTES + (s & 7u) * K_BODY_BYTES; }
uint kfactors_at(uint row, uint s) { return row + (s >> 3) * K_GROUP_BYTES + 8u * K_BODY_BYTES + K_FACTOR_BYTES * (s & 7u); }
#endif
#endif
