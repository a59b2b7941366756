// Shared parts of the matrix kernels. A workgroup of WG_SIZE (64; 512 for the decode kernel
// that stages its activation row in shared memory, matmul_q8.comp's SHARED_X) computes RPW
// output features at a time, TPR threads each (32, a subgroup on most GPUs, unless the kernel
// sets 64), reading consecutive weight bytes, for up to ROWS activation rows (mode 0), or for
// one row whose weight matrix is an expert picked by the router (mode 1: gate/up, input row
// r / n_used; mode 2: down, input row r). Partial sums meet in shared memory after a single
// barrier (portable to devices whose subgroups are narrower than TPR, such as lavapipe's).
#ifndef WG_SIZE
#define WG_SIZE 64
#endif
layout(local_size_x = WG_SIZE) in;
#include "matmul/matmul_push.glsl"
#define ROWS 8
#ifndef TPR
#define TPR 32u
#endif
#define RPW (uint(WG_SIZE) / TPR)
shared float red[ROWS][WG_SIZE];

uint out_feature() { return (gl_WorkGroupID.x + gl_WorkGroupID.z * 65535u) * RPW + gl_LocalInvocationID.x / TPR; }
uint lane() { return gl_LocalInvocationID.x % TPR; }

#if !(defined(ROPE_KV) && ROPE_KV)
// Sums each row's partial results across the workgroup and writes them. With SG_REDUCE
// (subgroups of exactly TPR threads, so one output's threads are one subgroup) a subgroup
// sum replaces the shared-memory exchange.
void reduce_and_store(float acc[ROWS], uint o, uint r0, uint n) {
    Part pt = part_of(o);
#if defined(SG_REDUCE) && SG_REDUCE
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = subgroupAdd(acc[j]);
        if (lane() == 0u && o < p.n_out) pt.out_.v[(r0 + j) * pt.width + pt.f] = s;
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
        pt.out_.v[(r0 + j) * pt.width + pt.f] = s;
    }
#endif
}
#endif

#if defined(ROPE_KV) && ROPE_KV
shared float pair_s[ROWS][2];
// The row sums of this workgroup's feature pair (o even, o + 1), rotated and stored as
// `role` says.
void reduce_and_store(float acc[ROWS], uint o, uint r0, uint n) {
    uint t = gl_LocalInvocationID.x, slot = t / TPR;
#if defined(SG_REDUCE) && SG_REDUCE
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = subgroupAdd(acc[j]);
        if (lane() == 0u) pair_s[j][slot] = s;
    }
#else
    for (uint j = 0u; j < ROWS; j++) red[j][t] = acc[j];
    barrier();
    if (lane() == 0u) {
        for (uint j = 0u; j < ROWS; j++) {
            if (j >= n) break;
            float s = 0.0;
            for (uint i = 0u; i < TPR; i++) s += red[j][t + i];
            pair_s[j][slot] = s;
        }
    }
#endif
    barrier();
    // Thread 0 holds feature o of slot 0, the pair's even one; widths are even.
    if (t != 0u || o >= p.n_out) return;
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        store_rope_pair(o, r0 + j, pair_s[j][0], pair_s[j][1]);
    }
}
#endif
