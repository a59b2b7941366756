// Activation rows to 8 bits in blocks of 32, as the CPU tier quantizes them (round half to
// even): four values per word to `xq`, and (d, d·Σq) per block to `xds`. Shared by
// quantize_q8, the fused norm, SwiGLU and attention's output.

// A block's scale and its inverse from its largest magnitude.
vec2 q8_scale(float amax) {
    float d = div_rn(amax, 127.0);
    return vec2(d, d > 0.0 ? div_rn(1.0, d) : 0.0);
}

// Four values times the inverse scale `id`, rounded and packed; their sum added to `sum`.
uint q8_pack4(vec4 v, float id, inout int sum) {
    uint packed = 0u;
    [[unroll]] for (uint e = 0u; e < 4u; e++) {
        precise float x = v[e] * id;
        int q = int(roundEven(x));
        sum += q;
        packed |= (uint(q) & 0xffu) << (8u * e);
    }
    return packed;
}

// One whole 32-element block by one invocation: words 8·block.., pair 2·block.
void store_q8_block(float x[32], Words xq, Floats xds, uint block) {
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(x[j]));
    vec2 s = q8_scale(amax);
    int sum = 0;
    [[unroll]] for (uint w = 0u; w < 8u; w++) {
        vec4 v = vec4(x[4u * w], x[4u * w + 1u], x[4u * w + 2u], x[4u * w + 3u]);
        xq.v[8u * block + w] = q8_pack4(v, s.y, sum);
    }
    xds.v[2u * block] = s.x;
    xds.v[2u * block + 1u] = s.x * float(sum);
}

#ifdef Q8_BY_WORDS
// Blocks quantized by eight invocations each, one word of four values per invocation, with
// store_q8_block's rounding: the largest magnitude and the sum meet in shared memory (two
// barriers), rather than one invocation walking the block's 32 values in series. The
// including shader defines Q8_BY_WORDS as its workgroup's width. A block's eight words are
// held by eight consecutive invocations from a multiple of eight, in order; `word` is the
// word's index in `xq` (block word / 8). Every invocation of the workgroup calls this (it has
// barriers); those with `holds` false take part in the barriers only.
shared float q8w_max[Q8_BY_WORDS];
shared int q8w_sum[Q8_BY_WORDS];
void store_q8_words(vec4 y, bool holds, uint word, Words xq, Floats xds) {
    uint i = gl_LocalInvocationID.x, first = i - i % 8u;
    barrier();
    if (holds) q8w_max[i] = max(max(abs(y.x), abs(y.y)), max(abs(y.z), abs(y.w)));
    barrier();
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) amax = max(amax, q8w_max[first + j]);
    vec2 sc = q8_scale(amax);
    int sum = 0;
    uint packed = q8_pack4(y, sc.y, sum);
    if (holds) {
        xq.v[word] = packed;
        q8w_sum[i] = sum;
    }
    barrier();
    if (holds && word % 8u == 0u) {
        int total = 0;
        [[unroll]] for (uint j = 0u; j < 8u; j++) total += q8w_sum[i + j];
        xds.v[2u * (word / 8u)] = sc.x;
        xds.v[2u * (word / 8u) + 1u] = sc.x * float(total);
    }
}
#endif
