// The 64-slot tiles of expert products that moe_group.comp laid out at `p.ids`: workgroup y
// takes tile y, whose slots all belong to one expert, so the tile shares that expert's
// weights. Shared by the tiled kernels (matmul_q8_tiled.comp, matmul_coopmat.comp GROUPED).
shared uint slot_s[64];
shared uint tile_s[3]; // expert, first slot, slots in this tile

// Reads workgroup y's tile into tile_s / slot_s (slot_s[i] for i past the tile repeats its
// last slot); false when y is past the last tile. Call from uniform control flow.
bool load_expert_tile(uint t) {
    if (t == 0u) {
        uint ne = uint(p.ids.v[0]), y = gl_WorkGroupID.y, e = 0u;
        // Tile offsets of experts e are at ne + 2 + e; find the expert whose tiles hold y.
        while (e < ne && uint(p.ids.v[ne + 3u + e]) <= y) e++;
        tile_s[2] = 0u;
        if (y < uint(p.ids.v[2u * ne + 2u])) {
            uint first = uint(p.ids.v[1u + e]) + 64u * (y - uint(p.ids.v[ne + 2u + e]));
            tile_s[0] = e;
            tile_s[1] = first;
            tile_s[2] = min(64u, uint(p.ids.v[2u + e]) - first);
        }
    }
    barrier();
    if (tile_s[2] == 0u) return false;
    if (t < 64u) {
        uint ne = uint(p.ids.v[0]);
        slot_s[t] = uint(p.ids.v[2u * ne + 3u + tile_s[1] + min(t, tile_s[2] - 1u)]);
    }
    barrier();
    return true;
}
