// Shared parts of the matrix kernels. A workgroup of 64 computes RPW output features, TPR
// threads (a subgroup on most GPUs) each, reading consecutive weight bytes, for up to ROWS
// activation rows (mode 0), or for one row whose weight matrix
// is an expert picked by the router (mode 1: gate/up, input row r / n_used; mode 2: down,
// input row r). Partial sums meet in shared memory after a single barrier (portable to
// devices whose subgroups are narrower than TPR, such as lavapipe's).
layout(local_size_x = 64) in;
#define ROWS 8
#define TPR 32u
#define RPW (64u / TPR)
layout(push_constant) uniform P {
    Words w; Floats x; Words xq; Floats out_; Ints ids;
    uint k; uint n_out; uint n_rows; uint row_bytes; uint expert_bytes; uint mode; uint n_used;
} p;
shared float red[ROWS][64];

uint out_feature() { return (gl_WorkGroupID.x + gl_WorkGroupID.z * 65535u) * RPW + gl_LocalInvocationID.x / TPR; }
uint lane() { return gl_LocalInvocationID.x % TPR; }

// Weight matrix and input row for expert modes.
Words expert_matrix(uint r) { return words_at(p.w, uint64_t(p.ids.v[r]) * uint64_t(p.expert_bytes)); }
uint input_row(uint r) { return p.mode == 1u ? r / p.n_used : r; }

// Sums each row's partial results across the workgroup and writes them. With SG_REDUCE
// (subgroups of exactly TPR threads, so one output's threads are one subgroup) a subgroup
// sum replaces the shared-memory exchange.
void reduce_and_store(float acc[ROWS], uint o, uint r0, uint n) {
#if defined(SG_REDUCE) && SG_REDUCE
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = subgroupAdd(acc[j]);
        if (lane() == 0u && o < p.n_out) p.out_.v[(r0 + j) * p.n_out + o] = s;
    }
#else
    uint t = gl_LocalInvocationID.x;
    for (uint j = 0u; j < ROWS; j++) red[j][t] = acc[j];
    barrier();
    if (lane() != 0u || o >= p.n_out) return;
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = 0.0;
        for (uint i = 0u; i < TPR; i++) s += red[j][t + i];
        p.out_.v[(r0 + j) * p.n_out + o] = s;
    }
#endif
}
