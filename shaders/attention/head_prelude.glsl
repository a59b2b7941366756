// The per-head arithmetic between the Q/K/V products and attention: qwen3's RMS norm of one
// head and RoPE's rotation of one pair. Shared by rope_kv_store.comp (its own dispatch) and
// attention.comp's PRELUDE variant (decode rows, where each attention workgroup prepares its
// own head), so that both round every value the same way.

// The scale of a head's RMS norm from the sum of its squares.
float head_rms_scale(float sum_sq, uint head_dim, float eps) {
    precise float ms = div_rn(sum_sq, float(head_dim)) + eps;
    return div_rn(1.0, sqrt_rn(ms));
}

// The two elements of a head that rotated pair i joins: (i, i + half_rot) in NeoX's pairing,
// (2i, 2i + 1) in llama's.
uvec2 rope_pair(uint i, uint half_rot, bool neox) {
    return neox ? uvec2(i, i + half_rot) : uvec2(2u * i, 2u * i + 1u);
}

// Pair (x0, x1) rotated by the angle whose cosine and sine are cs.
vec2 rope_rotate(vec2 x, vec2 cs) {
    return vec2(x.x * cs.x - x.y * cs.y, x.x * cs.y + x.y * cs.x);
}
