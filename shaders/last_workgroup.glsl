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
// starts (the host clears the step's counters at its start, 1 + TAIL_LEAVES words per
// dispatch). Needs
// common.glsl and a workgroup of TAIL_THREADS invocations.
#ifndef LAST_WORKGROUP_GLSL
#define LAST_WORKGROUP_GLSL
#define TAIL_THREADS 64u
// Counter words per dispatch: 1 + TAIL_LEAVES (COUNTER_WORDS in the Vulkan backend's
// record/recorder.rs).
#define TAIL_LEAVES 64u

// An output that another workgroup's tail reads.
void put(Floats o, uint i, float v) { CoherentFloats(uint64_t(o)).v[i] = v; }

shared bool tail_last;

// True in the workgroup that finishes last; every earlier workgroup's put() stores are then
// visible to it. Workgroups count in TAIL_LEAVES counters (workgroup g in counter 1 + g mod
// TAIL_LEAVES), and the last of each leaf in counter 0: a few thousand workgroups adding to
// one word queue behind each other's atomics.
bool last_workgroup(Words counter) {
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        uint g = gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
        uint leaf = g % TAIL_LEAVES, leaves = min(groups, TAIL_LEAVES);
        uint in_leaf = groups / TAIL_LEAVES + (leaf < groups % TAIL_LEAVES ? 1u : 0u);
        bool last = atomicAdd(counter.v[1u + leaf], 1u) == in_leaf - 1u;
        if (last) {
            memoryBarrierBuffer();
            last = atomicAdd(counter.v[0], 1u) == leaves - 1u;
        }
        tail_last = last;
    }
    barrier();
    bool last = tail_last;
    if (last) memoryBarrierBuffer();
    return last;
}
#endif
