// A dispatch whose last workgroup to finish does one more piece of work over every other
// workgroup's output (the residual add and norm after a decode product, tail_norm.glsl; the
// router's top-k after its product, moe_topk.glsl), instead of a dispatch of its own: a decode
// step then saves the barrier and launch that separate two dispatches, which on the H200 cost
// more than these small pieces of work (a one-workgroup norm or top-k took 6-9 µs per call in
// decode profiles).
//
// The kernel stores the outputs the tail reads with put() (coherent stores), then calls
// last_workgroup() where every workgroup of the grid reaches it; the one that counted last
// reads those outputs through coherent loads. The counter word is zero when the dispatch
// starts (the host clears the step's counters at its start, one word per dispatch). Needs
// common.glsl and a workgroup of TAIL_THREADS invocations.
#ifndef LAST_WORKGROUP_GLSL
#define LAST_WORKGROUP_GLSL
#define TAIL_THREADS 64u

// An output that another workgroup's tail reads.
void put(Floats o, uint i, float v) { CoherentFloats(uint64_t(o)).v[i] = v; }

shared bool tail_last;

// True in the workgroup that finishes last; every earlier workgroup's put() stores are then
// visible to it.
bool last_workgroup(Words counter) {
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        tail_last = atomicAdd(counter.v[0], 1u) == groups - 1u;
    }
    barrier();
    bool last = tail_last;
    if (last) memoryBarrierBuffer();
    return last;
}
#endif
