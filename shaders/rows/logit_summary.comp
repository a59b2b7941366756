#version 450
// The summary of a logit row that a sampler with a small top-k, greedy decoding and the API's
// log-probabilities need (LogitRows::LastTop), so that such a row's whole vocabulary never
// crosses to the host: its `k` largest logits' ids and values, largest first and the lower id
// first among equal values (f32::total_cmp's order, as zinc_plugin_api::summarise_row gives
// it), and ln Σ exp(row). One workgroup per summarised row; only shared-memory atomics and
// barriers, no subgroup operations, so it runs on every device.
//
// The k-th largest value is found exactly by a radix select over the values' order-keeping
// 32-bit keys, one byte per pass from the top: each pass counts the keys that share the bytes
// chosen so far into 256 bins (eight copies of the bins, threads spread over them: logits
// share their top byte, and one bin taking every count serialises the atomics), and the bin
// that holds the k-th largest is chosen by a parallel suffix sum over the bins. The first pass
// also sums the row's exponentials. Then every value above the k-th joins the candidates, with
// as many equal to it as are missing (the lowest ids: a scan by one invocation in the rare
// case that more are equal than fit), and 64 slots are sorted. 1,024 invocations: a one-row
// decode step has this one workgroup, on one multiprocessor. Workgroup memory stays under the
// 16 KiB every device offers.
#include "common/common.glsl"
#define WG 1024u
#define MAX_K 64u
#define COPIES 8u
layout(local_size_x = 1024) in;
layout(push_constant) uniform P {
    // The selected logit rows (n each); the summaries, (2k + 1) words per row: k ids, k
    // values' bits, the normaliser's bits.
    Floats x; Words out_;
    uint n; uint first; uint k;
} p;

shared uint hist[COPIES * 256u];
shared float red[WG];
// Keys at or above each bin (a suffix sum of the bins' counts).
shared uint at_or_above[256];
shared uint choice[3];
shared uint slot_key[MAX_K];
shared uint slot_id[MAX_K];
shared uint filled;

// Unsigned keys in the order of f32::total_cmp.
uint key_of(float v) {
    uint b = floatBitsToUint(v);
    return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}
float value_of(uint key) {
    return uintBitsToFloat((key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key);
}
// Whether slot a belongs before slot b: the larger key, then the lower id.
bool before(uint a, uint b) {
    return slot_key[a] > slot_key[b] || (slot_key[a] == slot_key[b] && slot_id[a] < slot_id[b]);
}

void main() {
    uint t = gl_LocalInvocationID.x, row = gl_WorkGroupID.x;
    Floats x = floats_at(p.x, uint64_t(p.first + row) * uint64_t(p.n));
    uint copy = (t % COPIES) * 256u;
    // Pass over the top byte, with the running maximum and sum of exponentials.
    for (uint i = t; i < COPIES * 256u; i += WG) hist[i] = 0u;
    barrier();
    float m = uintBitsToFloat(0xff800000u), s = 0.0;
    for (uint i = t; i < p.n; i += WG) {
        float v = x.v[i];
        if (v > m) {
            s = s * exp(m - v) + 1.0;
            m = v;
        } else {
            s += exp(v - m);
        }
        atomicAdd(hist[copy + (key_of(v) >> 24)], 1u);
    }
    red[t] = m;
    barrier();
    for (uint w = WG / 2u; w > 0u; w >>= 1) {
        if (t < w) red[t] = max(red[t], red[t + w]);
        barrier();
    }
    float row_max = red[0];
    barrier();
    red[t] = m == uintBitsToFloat(0xff800000u) ? 0.0 : s * exp(m - row_max);
    barrier();
    for (uint w = WG / 2u; w > 0u; w >>= 1) {
        if (t < w) red[t] += red[t + w];
        barrier();
    }
    float norm = row_max + log(red[0]);

    uint prefix = 0u, mask = 0u, remaining = p.k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (shift < 24) {
            for (uint i = t; i < COPIES * 256u; i += WG) hist[i] = 0u;
            barrier();
            for (uint i = t; i < p.n; i += WG) {
                uint key = key_of(x.v[i]);
                if ((key & mask) == prefix) atomicAdd(hist[copy + ((key >> uint(shift)) & 255u)], 1u);
            }
            barrier();
        }
        // The bin, from the top, where the count of keys at or above it reaches `remaining`:
        // the largest b with at_or_above[b] >= remaining.
        uint count = 0u;
        if (t < 256u) {
            for (uint j = 0u; j < COPIES; j++) count += hist[j * 256u + t];
            at_or_above[t] = count;
        }
        barrier();
        for (uint off = 1u; off < 256u; off <<= 1) {
            uint add = t < 256u && t + off < 256u ? at_or_above[t + off] : 0u;
            barrier();
            if (t < 256u) at_or_above[t] += add;
            barrier();
        }
        if (t < 256u) {
            uint above = t == 255u ? 0u : at_or_above[t + 1u];
            if (at_or_above[t] >= remaining && above < remaining) {
                choice[0] = t;
                choice[1] = remaining - above;
                choice[2] = count;
            }
        }
        barrier();
        prefix |= choice[0] << uint(shift);
        mask |= 255u << uint(shift);
        remaining = choice[1];
        barrier();
    }
    // `prefix` is the k-th largest key; `remaining` of the keys equal to it are taken, of
    // `choice[2]` such keys.
    uint kth = prefix, equal = choice[2];
    if (t < MAX_K) {
        slot_key[t] = 0u;
        slot_id[t] = 0xffffffffu;
    }
    if (t == 0u) filled = 0u;
    barrier();
    bool all_equal = equal == remaining;
    for (uint i = t; i < p.n; i += WG) {
        uint key = key_of(x.v[i]);
        if (key > kth || (all_equal && key == kth)) {
            uint at = atomicAdd(filled, 1u);
            slot_key[at] = key;
            slot_id[at] = i;
        }
    }
    barrier();
    if (!all_equal && t == 0u) {
        uint at = filled;
        for (uint i = 0u; i < p.n && at < p.k; i++) {
            if (key_of(x.v[i]) == kth) {
                slot_key[at] = kth;
                slot_id[at] = i;
                at++;
            }
        }
    }
    barrier();
    // Bitonic sort of the 64 slots, best first (the empty slots, key 0 and id ~0, last).
    for (uint size = 2u; size <= MAX_K; size <<= 1) {
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            if (t < MAX_K) {
                uint j = t ^ stride;
                if (j > t) {
                    bool best_first = (t & size) == 0u;
                    if (best_first ? before(j, t) : before(t, j)) {
                        uint kk = slot_key[t], id = slot_id[t];
                        slot_key[t] = slot_key[j];
                        slot_id[t] = slot_id[j];
                        slot_key[j] = kk;
                        slot_id[j] = id;
                    }
                }
            }
            barrier();
        }
    }
    uint base = row * (2u * p.k + 1u);
    if (t < p.k) {
        p.out_.v[base + t] = slot_id[t];
        p.out_.v[base + p.k + t] = floatBitsToUint(value_of(slot_key[t]));
    }
    if (t == 0u) p.out_.v[base + 2u * p.k] = floatBitsToUint(norm);
}
