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
#if defined(SG_REDUCE) && SG_REDUCE
    Part pt = part_of(o);
    for (uint j = 0u; j < ROWS; j++) {
        if (j >= n) break;
        float s = subgroupAdd(acc[j]);
        if (lane() == 0u && o < p.n_out) pt.out_.v[(r0 + j) * pt.width + pt.f] = s;
    }
#else
    uint t = gl_LocalInvocationID.x;
    for (uint j = 0u; j < ROWS; j++) red[j][t] = acc[j];
    barrier();
    // One invocation per feature and row adds that row's TPR partial sums in lane order: the
    // sums of a workgroup run side by side rather than one after another in lane 0 of each
    // feature (on lavapipe, which runs invocations as SIMD lanes, the serial sums were most
    // of the kernel's time).
    uint slot = t / ROWS, j = t % ROWS, f = o - t / TPR + slot;
    if (slot >= RPW || j >= n || f >= p.n_out) return;
    float s = 0.0;
    for (uint i = 0u; i < TPR; i++) s += red[j][slot * TPR + i];
    Part pf = part_of(f);
    pf.out_.v[(r0 + j) * pf.width + pf.f] = s;
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
    // One invocation per feature and row, as in the other reduce_and_store.
    uint sum_slot = t / ROWS, sum_row = t % ROWS;
    if (sum_slot < RPW && sum_row < n) {
        float s = 0.0;
        for (uint i = 0u; i < TPR; i++) s += red[sum_row][sum_slot * TPR + i];
        pair_s[sum_row][sum_slot] = s;
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
