#version 450
// Weight (any GGUF type, dequantized element by element) × f32 activation rows. The CPU tier
// dots K-quant and float weights against f32 activations the same way.
//
// SG_REDUCE (f32 weights, devices with subgroup arithmetic): the normed router's two sums
// over the workgroup are subgroup sums met in shared memory instead of a six-level tree with a
// barrier per level.
#ifndef SG_REDUCE
#define SG_REDUCE 0
#endif
#if SG_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common/common.glsl"
#include "blocks/dequant.glsl"
// f32 weights (an MoE router's, 2,048 wide) take the whole workgroup per feature: twice the
// threads, half the loads each, which measured faster for the 30B-A3B's router. The host
// launches one workgroup per feature for them.
#if TYPE == 0
#define TPR 64u
#endif
#include "matmul/matmul_common.glsl"
#if TYPE == 0
#define Q8_BY_WORDS TPR
#include "common/q8.glsl"
#endif
// One activation row against one weight row: UNROLL elements per iteration, branch-free, so
// their loads are in flight together (see matmul_q8.comp). Float weights take sixteen: one
// load per element, and a row of a few thousand (an MoE router's) would otherwise be a
// chain of a dozen dependent round trips.
#if TYPE == 0 || TYPE == 1 || TYPE == 30
#define UNROLL 16u
#else
#define UNROLL 4u
#endif
float single_row(Words wm, uint rb, uint xr, uint k_end, uint t) {
    float a = 0.0;
#if TYPE == 0
    if (p.k % 4u == 0u) {
        // f32 rows of a multiple of four: weights and inputs in 16-byte loads, so a row of
        // 2,048 (an MoE router's) is one round trip per thread instead of four.
        Vec4f w = Vec4f(uint64_t(wm) + rb), x = Vec4f(uint64_t(p.x) + 4ul * xr);
        uint n = k_end / 4u;
        for (uint i = t; i < n; i += UNROLL * TPR) {
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
                uint ii = min(i + u * TPR, n - 1u);
                float keep = i + u * TPR < n ? 1.0 : 0.0;
                a += keep * dot(w.v[ii], x.v[ii]);
            }
        }
        return a;
    }
#endif
    for (uint i = t; i < k_end; i += UNROLL * TPR) {
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            uint ii = min(i + u * TPR, k_end - 1u);
            float keep = i + u * TPR < k_end ? 1.0 : 0.0;
            a += keep * dq(wm, rb, ii) * p.x.v[xr + ii];
        }
    }
    return a;
}

#if TYPE == 0
// The RMS norm before an MoE block, folded into its f32 router's decode product (`norm_w`
// set; one row, k a multiple of 32): `x` is the row before the norm. Every workgroup sums its
// squares and dots its weights with the normalised values, computed as rms_norm.comp
// computes them (only the sum's order differs); workgroup b < k / 32 also writes block b of
// the normalised row's 8-bit copy to `xq` (values) and `out2` (its (d, d·Σq)) for the
// experts' products after it (block b + the grid's width too, when the grid is narrower
// than the row's blocks). This saves the norm's one-workgroup dispatch and the barrier after
// it. The first NORM_CHUNK 16-byte words of the row's weights, its values and the norm's
// weights per thread are all loaded before the sum of squares (a router row of 2,048 is one
// chunk): the weights do not wait on the norm. And the 8-bit copy is written after the
// logit, so that the logit does not wait on it.
#define NORM_CHUNK 8u
shared float norm_red[TPR];

// The sum of `v` over the workgroup (every invocation gets it).
float workgroup_sum(float v, uint t) {
#if SG_REDUCE
    float s = subgroupAdd(v);
    barrier();
    if (subgroupElect()) norm_red[gl_SubgroupID] = s;
    barrier();
    float total = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) total += norm_red[i];
    return total;
#else
    barrier();
    norm_red[t] = v;
    barrier();
    for (uint h = TPR / 2u; h > 0u; h >>= 1) {
        if (t < h) norm_red[t] += norm_red[t + h];
        barrier();
    }
    return norm_red[0];
#endif
}

// Feature o's logit from the row normalised by `scale`, the first chunk's loads held from
// before the norm.
float normed_dot(uint o, uint t, float scale, vec4 xv[NORM_CHUNK], vec4 gv[NORM_CHUNK], vec4 wv[NORM_CHUNK]) {
    Vec4f x = Vec4f(uint64_t(p.x)), g = Vec4f(uint64_t(p.norm_w));
    Vec4f w = Vec4f(uint64_t(p.w) + min(o, p.n_out - 1u) * p.row_bytes);
    uint n = p.k / 4u;
    float a = 0.0;
    for (uint i = t, first = 1u; i < n; i += NORM_CHUNK * TPR, first = 0u) {
        [[unroll]] for (uint u = 0u; u < NORM_CHUNK; u++) {
            uint ii = min(i + u * TPR, n - 1u);
            float keep = i + u * TPR < n ? 1.0 : 0.0;
            vec4 v = xv[u], gw = gv[u], ww = wv[u];
            if (first == 0u) {
                v = x.v[ii];
                gw = g.v[ii];
                ww = w.v[ii];
            }
            vec4 y;
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                precise float ye = v[e] * scale * gw[e];
                y[e] = ye;
            }
            a += keep * dot(ww, y);
        }
    }
    return a;
}

void normed_router(uint o, uint t) {
    Vec4f x = Vec4f(uint64_t(p.x)), g = Vec4f(uint64_t(p.norm_w));
    Vec4f w = Vec4f(uint64_t(p.w) + min(o, p.n_out - 1u) * p.row_bytes);
    uint n = p.k / 4u;
    vec4 xv[NORM_CHUNK], gv[NORM_CHUNK], wv[NORM_CHUNK];
    [[unroll]] for (uint u = 0u; u < NORM_CHUNK; u++) {
        uint ii = min(t + u * TPR, n - 1u);
        xv[u] = x.v[ii];
        gv[u] = g.v[ii];
        wv[u] = w.v[ii];
    }
    float s = 0.0;
    for (uint i = t, first = 1u; i < n; i += NORM_CHUNK * TPR, first = 0u) {
        [[unroll]] for (uint u = 0u; u < NORM_CHUNK; u++) {
            vec4 v = first != 0u ? xv[u] : x.v[min(i + u * TPR, n - 1u)];
            if (i + u * TPR < n) {
                [[unroll]] for (uint e = 0u; e < 4u; e++) {
                    precise float sq = v[e] * v[e];
                    s += sq;
                }
            }
        }
    }
    precise float ms = div_rn(workgroup_sum(s, t), float(p.k)) + p.eps;
    float scale = div_rn(1.0, sqrt_rn(ms));
    float logit = workgroup_sum(normed_dot(o, t, scale, xv, gv, wv), t);
    if (t == 0u && o < p.n_out) p.out_.v[o] = logit;
    // Block blk's eight 16-byte words (indices 8·blk + e) are those invocation 8·(blk % 8) + e
    // loaded as its word blk / 8 of the first chunk: those eight normalise their four values
    // from registers (or from memory, past the first chunk) and quantize them together.
    for (uint blk = gl_WorkGroupID.x; blk < p.k / 32u; blk += gl_NumWorkGroups.x) {
        uint e = t % 8u, chunk = blk / 8u, idx = 8u * blk + e;
        bool owner = t / 8u == blk % 8u;
        vec4 v = vec4(0.0), gw = vec4(0.0);
        if (chunk < NORM_CHUNK) {
            [[unroll]] for (uint u = 0u; u < NORM_CHUNK; u++) {
                if (u == chunk) {
                    v = xv[u];
                    gw = gv[u];
                }
            }
        } else {
            v = x.v[min(idx, n - 1u)];
            gw = g.v[min(idx, n - 1u)];
        }
        vec4 y;
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            precise float yc = v[c] * scale * gw[c];
            y[c] = yc;
        }
        store_q8_words(y, owner, idx, p.xq, p.out2);
    }
}
#endif

void main() {
    uint o = out_feature(), t = lane();
#if TYPE == 0
    if (uint64_t(p.norm_w) != 0ul) {
        normed_router(o, t);
        return;
    }
#endif
    // Threads past the last feature still take part in the barrier, with nothing to add.
    uint k_end = o < p.n_out ? p.k : 0u;
    float acc[ROWS] = float[ROWS](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if (p.mode == 0u && p.n_rows > 1u) {
        uint r0 = gl_WorkGroupID.y * ROWS, n = min(ROWS, p.n_rows - r0);
        uint rb = min(o, p.n_out - 1u) * p.row_bytes;
        for (uint i = t; i < k_end; i += TPR) {
            float wv = dq(p.w, rb, i);
            // Constant bounds keep acc[] in registers.
            for (uint j = 0u; j < ROWS; j++) if (j < n) acc[j] += wv * p.x.v[(r0 + j) * p.k + i];
        }
        reduce_and_store(acc, o, r0, n);
    } else {
        uint r = gl_WorkGroupID.y;
        Words wm = p.mode == 0u ? p.w : expert_matrix(p.w, r);
        uint xr = (p.mode == 0u ? r : input_row(r)) * p.k, rb = min(o, p.n_out - 1u) * p.row_bytes;
        acc[0] = single_row(wm, rb, xr, k_end, t);
        reduce_and_store(acc, o, r, 1u);
    }
}
