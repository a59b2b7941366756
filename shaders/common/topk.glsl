// The router's choice from one row's expert probabilities, as the CPU tier makes it: the
// n_used largest (on a tie, the lower expert id), their weights renormalised over the choice
// summed in rank order, the chosen ids in ascending order (the order in which the CPU tier
// sums the experts). Shared by moe_route.comp and the top-k prologue of matvec_q8.comp's
// SWIGLU variant, so that the rule has one definition. Up to 256 experts, 64 chosen; the
// workgroup has at least 256 invocations.
// Four probabilities per element, so that the rank pass below reads four per load.
shared vec4 topk_prob[64];
shared uint topk_rank_id[64];
shared float topk_rank_p[64];

// Before the barrier that follows staging the probabilities: expert t's probability, and
// valid ids in every rank even if NaN probabilities leave ranks unfilled (an id past the
// experts would send the expert products outside their weights).
void topk_stage(uint t, uint n, float pt) {
    if (t < n) topk_prob[t / 4u][t % 4u] = pt;
    if (t < 64u) {
        topk_rank_id[t] = min(t, n - 1u);
        topk_rank_p[t] = 0.0;
    }
}

// After that barrier: each expert finds its own rank by one pass over the probabilities
// (a decode step has one row, so choices by repeated arg-max reductions, a dozen barriers
// each, were most of the router's time), four per shared-memory load.
void topk_rank(uint t, uint n, uint n_used) {
    if (t >= n) return;
    float pt = topk_prob[t / 4u][t % 4u];
    uint rank = 0u;
    for (uint j4 = 0u; j4 < n; j4 += 4u) {
        vec4 p4 = topk_prob[j4 / 4u];
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            uint j = j4 + e;
            float pj = p4[e];
            rank += j < n && (pj > pt || (pj == pt && j < t)) ? 1u : 0u;
        }
    }
    if (rank < n_used) {
        topk_rank_id[rank] = t;
        topk_rank_p[rank] = pt;
    }
}

// After the barrier that follows topk_rank, for t < n_used: the choice of rank t, its place in
// ascending id order, and its renormalised weight.
void topk_choice(uint t, uint n_used, out uint id, out uint at, out float weight) {
    float total = 0.0;
    id = topk_rank_id[t];
    at = 0u;
    for (uint k = 0u; k < n_used; k++) {
        total += topk_rank_p[k];
        uint other = topk_rank_id[k];
        at += other < id || (other == id && k < t) ? 1u : 0u;
    }
    weight = topk_rank_p[t] / total;
}
