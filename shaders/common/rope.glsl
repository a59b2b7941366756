// cos and sin of a RoPE angle, position · inv_freq, reduced to [-pi, pi] in two steps first
// (GPU sin/cos are only accurate near zero and positions reach the thousands). Shared by
// rope.comp, rope_kv_store.comp and the row kernel's RoPE epilogue.
vec2 rope_cos_sin(float position, float inv_freq) {
    float theta = position * inv_freq;
    const float two_pi_hi = 6.28125, two_pi_lo = 1.9353071795864769e-3;
    float k = round(theta * 0.15915494309189535);
    float red = (theta - k * two_pi_hi) - k * two_pi_lo;
    return vec2(cos(red), sin(red));
}
