#version 450
// Groups a step's (row, expert) slots by expert for the tiled expert products: counts per
// expert, their offsets, the first 64-slot tile of each expert, and the slots in expert order.
// Layout of `group`: [0] n_expert, [1 ..= n_expert+1] slot offsets, [n_expert+2 ..= 2·n_expert+2]
// tile offsets, then the slots. Slots of one expert may come in any order: each output row is
// computed the same way wherever it sits in a tile.
#include "common/common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P { Ints ids; Ints group; uint n_slots; uint n_expert; } p;
shared uint count[256];
shared uint cursor[256];
void main() {
    uint t = gl_LocalInvocationID.x, ne = p.n_expert;
    count[t] = 0u;
    barrier();
    for (uint s = t; s < p.n_slots; s += 256u) atomicAdd(count[uint(p.ids.v[s])], 1u);
    barrier();
    if (t == 0u) {
        uint off = 0u, tiles = 0u;
        p.group.v[0] = int(ne);
        for (uint e = 0u; e < ne; e++) {
            p.group.v[1u + e] = int(off);
            p.group.v[ne + 2u + e] = int(tiles);
            cursor[e] = off;
            off += count[e];
            tiles += (count[e] + 63u) / 64u;
        }
        p.group.v[1u + ne] = int(off);
        p.group.v[2u * ne + 2u] = int(tiles);
    }
    barrier();
    uint base = 2u * ne + 3u;
    for (uint s = t; s < p.n_slots; s += 256u) {
        uint k = atomicAdd(cursor[uint(p.ids.v[s])], 1u);
        p.group.v[base + k] = int(s);
    }
}
