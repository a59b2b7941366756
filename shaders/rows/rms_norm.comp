#version 450
// RMS norm over groups of `width` elements (a row, or one head for qwen3's Q/K norms), in
// place or into another buffer: out = x / sqrt(mean(x²) + eps) * weight[i % width].
// Optionally first x += add (the residual add before a norm, written back to x), and
// optionally the result is also quantized to 8 bits for the matmuls that read it (as
// quantize_q8.comp does), which saves two dispatches and two barriers per norm.
// The row is staged in shared memory (widths up to MAX_WIDTH; the host checks), so every
// global access is one element per thread, consecutive across threads: a single workgroup
// per row is bound by memory latency, and independent loads are what hide it.
// LOW_MEM=1 (rms_norm.lowmem, for devices that offer less than the 40 KiB of workgroup memory
// the staged row takes — lavapipe advertises 32): each thread keeps its elements in registers,
// and the 8-bit copy reads the normalised row back from the output it has just written (a
// coherent view, after a buffer barrier) instead of from shared memory: 8 KiB.
#ifndef LOW_MEM
#define LOW_MEM 0
#endif
#include "common/common.glsl"
#include "common/q8.glsl"
layout(local_size_x = 1024) in;
#define MAX_WIDTH 8192u
layout(push_constant) uniform P {
    Floats x; Floats add; Floats weight; Floats out_; Words xq; Floats xds;
    uint width; float eps;
} p;
#if LOW_MEM
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CoherentFloats { float v[]; };
#else
shared float row_s[MAX_WIDTH];
#endif
shared float partial[1024];
shared int block_sum[1024];
void main() {
    uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = gl_LocalInvocationID.x;
    uint base = g * p.width;
    bool has_add = uint64_t(p.add) != 0ul;
    float s = 0.0;
    // Up to eight elements per thread (MAX_WIDTH / 1024), loads before stores, so a single
    // workgroup (decode normalises one row) keeps enough loads in flight; the weights are
    // loaded here too, so their latency overlaps the reduction.
    float gw[8];
#if LOW_MEM
    float xv[8];
#endif
    [[unroll]] for (uint it = 0u; it < 2u; it++) {
        uint i0 = t + 4096u * it;
        if (i0 >= p.width) break;
        float v[4];
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = min(i0 + 1024u * u, p.width - 1u);
            v[u] = p.x.v[base + i] + (has_add ? p.add.v[base + i] : 0.0);
            gw[4u * it + u] = p.weight.v[i];
        }
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = i0 + 1024u * u;
            if (i < p.width) {
                if (has_add) p.x.v[base + i] = v[u];
#if LOW_MEM
                xv[4u * it + u] = v[u];
#else
                row_s[i] = v[u];
#endif
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
    [[unroll]] for (uint it = 0u; it < 2u; it++) {
        uint i0 = t + 4096u * it;
        if (i0 >= p.width) break;
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
            uint i = i0 + 1024u * u;
            if (i < p.width) {
#if LOW_MEM
                precise float y = xv[4u * it + u] * scale * gw[4u * it + u];
                CoherentFloats(uint64_t(p.out_)).v[base + i] = y;
#else
                precise float y = row_s[i] * scale * gw[4u * it + u];
                p.out_.v[base + i] = y;
                row_s[i] = y;
#endif
            }
        }
    }
    if (uint64_t(p.xq) == 0ul) return;
#if LOW_MEM
    // The other threads' outputs, read back below, visible to this one.
    memoryBarrierBuffer();
    CoherentFloats row = CoherentFloats(uint64_t(p.out_) + uint64_t(base) * 4ul);
#endif
    barrier();
    // The 8-bit copy (width % 32 == 0 here: the host asks only then), one word of four values
    // per thread; a block's eight threads meet in shared memory for its largest magnitude and
    // its sum, so no thread walks a whole block alone.
    uint words = p.width / 4u;
    for (uint w0 = 0u; w0 < words; w0 += 1024u) {
        uint w = w0 + t, first = t & ~7u;
#if LOW_MEM
        vec4 v = w < words ? vec4(row.v[4u * w], row.v[4u * w + 1u], row.v[4u * w + 2u], row.v[4u * w + 3u]) : vec4(0.0);
#else
        vec4 v = w < words ? vec4(row_s[4u * w], row_s[4u * w + 1u], row_s[4u * w + 2u], row_s[4u * w + 3u]) : vec4(0.0);
#endif
        partial[t] = max(max(abs(v.x), abs(v.y)), max(abs(v.z), abs(v.w)));
        barrier();
        float amax = 0.0;
        for (uint i = 0u; i < 8u; i++) amax = max(amax, partial[first + i]);
        vec2 sc = q8_scale(amax);
        int sum = 0;
        uint packed = q8_pack4(v, sc.y, sum);
        block_sum[t] = sum;
        barrier();
        if (w < words) {
            p.xq.v[base / 4u + w] = packed;
            if ((t & 7u) == 0u) {
                int total = 0;
                for (uint i = 0u; i < 8u; i++) total += block_sum[t + i];
                uint blk = (base + 4u * w) / 32u;
                p.xds.v[2u * blk] = sc.x;
                p.xds.v[2u * blk + 1u] = sc.x * float(total);
            }
        }
        barrier();
    }
}
