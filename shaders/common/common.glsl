// Shared declarations for zinc's compute shaders. Buffers are reached through buffer device
// addresses passed in push constants, so a dispatch needs no descriptor sets.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };
// 16- and 8-byte views for activation rows whose blocks are that aligned (8-bit values of a
// 32-element block are 32 bytes; its (d, d·Σq) pair is 8).
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec2s { vec2 v[]; };
// 8-byte view of words (Q6_K's high bits of a sub-block, kblock.glsl).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer UVec2s { uvec2 v[]; };
// 16-byte view of f32 rows whose length is a multiple of four.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4f { vec4 v[]; };

// Little-endian byte, 16-bit and f16 reads at any byte offset (16-bit reads at even offsets).
uint rd_u8(Words b, uint off) { return (b.v[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }
uint rd_u16(Words b, uint off) { return (b.v[off >> 2] >> ((off & 2u) * 8u)) & 0xffffu; }
float rd_f16(Words b, uint off) { return unpackHalf2x16(rd_u16(b, off)).x; }
// Four bytes at an even offset, as one word. Branch-free (two loads, one select), so that
// unrolled loops can issue every load before the first use.
uint rd_u32_even(Words b, uint off) {
    uint w0 = b.v[off >> 2], w1 = b.v[(off >> 2) + 1u];
    return (off & 2u) == 0u ? w0 : (w0 >> 16) | (w1 << 16);
}
int sext8(uint x) { return int(x << 24) >> 24; }

// Address arithmetic on 64-bit buffer addresses.
Words words_at(Words base, uint64_t byte_offset) { return Words(uint64_t(base) + byte_offset); }
Floats floats_at(Floats base, uint64_t float_offset) { return Floats(uint64_t(base) + float_offset * 4ul); }

// a / b rounded as IEEE division rounds it (one correction step on the quotient), for the few
// scalars that decide 8-bit rounding: Vulkan lets division be off by 2.5 ulp, and compilers
// turn division by a constant into multiplication by its reciprocal, either of which would
// make activations quantize differently from the CPU tier.
float div_rn(float a, float b) {
    precise float q = a / b;
    precise float r = fma(-q, b, a);
    precise float c = q + r / b;
    return c;
}
// sqrt(x) with one Newton correction, for the same reason.
float sqrt_rn(float x) {
    precise float s = sqrt(x);
    precise float r = fma(-s, s, x);
    precise float c = s + r / (2.0 * s);
    return x > 0.0 ? c : s;
}
// tanh(u) as 1 - 2 / (exp(2u) + 1): finite for every u, unlike a ratio of exponentials
// (Gemma 2's soft caps).
float tanh_finite(float u) { return 1.0 - 2.0 / (exp(2.0 * u) + 1.0); }
// silu(gate) · up, in one order without fusing, so that every kernel that quantizes it
// (swiglu_q8.comp, the experts' SwiGLU epilogue in matvec_q8.comp) rounds the same values.
float swiglu(float gate, float up) {
    precise float v = gate / (1.0 + exp(-gate)) * up;
    return v;
}
