#version 450
// RMS norm over groups of `width` elements (a row, or one head for qwen3's Q/K norms), in
// place or into another buffer: out = x / sqrt(mean(x²) + eps) * weight[i % width].
// Optionally first x += add (the residual add before a norm, written back to x), and
// optionally the result is also quantized to 8 bits for the matmuls that read it (as
// quantize_q8.comp does), which saves two dispatches and two barriers per norm.
// The row is staged in shared memory (widths up to MAX_WIDTH; the host checks), so every
// global access is one element per thread, consecutive across threads: a single workgroup
// per row is bound by memory latency, and independent loads are what hide it.
#include "common.glsl"
layout(local_size_x = 1024) in;
#define MAX_WIDTH 8192u
layout(push_constant) uniform P {
    Floats x; Floats add; Floats weight; Floats out_; Words xq; Floats xds;
    uint width; float eps;
} p;
shared float row_s[MAX_WIDTH];
shared float partial[1024];
void main() {
    uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = gl_LocalInvocationID.x;
    uint base = g * p.width;
    bool has_add = uint64_t(p.add) != 0ul;
    float s = 0.0;
    // Four elements per thread per iteration, loads before stores, so a single workgroup
    // (decode normalises one row) keeps enough loads in flight.
    for (uint i0 = t; i0 < p.width; i0 += 4096u) {
        float v[4];
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = min(i0 + 1024u * u, p.width - 1u);
            v[u] = p.x.v[base + i] + (has_add ? p.add.v[base + i] : 0.0);
        }
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = i0 + 1024u * u;
            if (i < p.width) {
                if (has_add) p.x.v[base + i] = v[u];
                row_s[i] = v[u];
                precise float sq = v[u] * v[u];
                s += sq;
            }
        }
    }
    partial[t] = s;
    barrier();
    for (uint k = 512u; k > 0u; k >>= 1) { if (t < k) partial[t] += partial[t + k]; barrier(); }
    precise float ms = div_rn(partial[0], float(p.width)) + p.eps;
    float scale = div_rn(1.0, sqrt_rn(ms));
    for (uint i0 = t; i0 < p.width; i0 += 4096u) {
        float g[4];
        [[unroll]] for (uint u = 0u; u < 4u; u++) g[u] = p.weight.v[min(i0 + 1024u * u, p.width - 1u)];
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = i0 + 1024u * u;
            if (i < p.width) {
                precise float y = row_s[i] * scale * g[u];
                p.out_.v[base + i] = y;
                row_s[i] = y;
            }
        }
    }
    if (uint64_t(p.xq) == 0ul) return;
    barrier();
    // width % 32 == 0 here (the host asks only then): one 32-element block per thread.
    for (uint c = t; c < p.width / 32u; c += 1024u) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(row_s[32u * c + j]));
        float d = div_rn(amax, 127.0), id = d > 0.0 ? div_rn(1.0, d) : 0.0;
        int sum = 0;
        for (uint w = 0u; w < 8u; w++) {
            uint packed = 0u;
            for (uint e = 0u; e < 4u; e++) {
                precise float v = row_s[32u * c + 4u * w + e] * id;
                int q = int(roundEven(v));
                sum += q;
                packed |= (uint(q) & 0xffu) << (8u * e);
            }
            p.xq.v[base / 4u + 8u * c + w] = packed;
        }
        p.xds.v[2u * (base / 32u + c)] = d;
        p.xds.v[2u * (base / 32u + c) + 1u] = d * float(sum);
    }
}
