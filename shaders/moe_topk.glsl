// The router's choice for one row of a mixture of experts: softmax over the expert logits,
// the n_used largest (ties to the lower index), weights renormalised to sum to 1. The chosen
// experts are written in ascending id order, the order in which the CPU tier sums them. Run
// by moe_route.comp (a workgroup per row) and by the f32 router product's last workgroup at
// decode (matmul.comp with TAIL_TOPK). Up to 256 experts, 64 chosen; the includer defines
// ROUTE_THREADS, its workgroup size (a power of two, at least 64). Each expert finds its own
// rank by one pass over the probabilities (a decode step has one row, so choices by
// repeated arg-max reductions, a dozen barriers each, were most of the router's time).
// Needs common.glsl.
shared float route_prob[256];
shared float route_red[ROUTE_THREADS];
shared uint route_chosen[64];
shared float route_chosen_p[64];

// Sum (max = false) or largest value (max = true) of every thread's `v`.
float route_reduce(float v, bool max_) {
    uint t = gl_LocalInvocationIndex;
    route_red[t] = v;
    barrier();
    for (uint s = ROUTE_THREADS / 2u; s > 0u; s >>= 1) {
        if (t < s) route_red[t] = max_ ? max(route_red[t], route_red[t + s]) : route_red[t] + route_red[t + s];
        barrier();
    }
    float r = route_red[0];
    barrier();
    return r;
}

// Row r's logits at `logits` (read coherently: the tail reads other workgroups' stores).
void route_row(uint64_t logits, uint r, Ints ids, Floats weights, uint n_expert, uint n_used) {
    uint t = gl_LocalInvocationIndex;
    CoherentFloats lg = CoherentFloats(logits + 4ul * r * n_expert);
    // A thread takes experts t, t + ROUTE_THREADS, … (in that order for its partial sums).
    float mx = -1.0e30;
    for (uint e = t; e < 256u; e += ROUTE_THREADS) {
        float v = e < n_expert ? lg.v[e] : -1.0e30;
        route_prob[e] = v;
        mx = max(mx, v);
    }
    mx = route_reduce(mx, true);
    float part = 0.0;
    for (uint e = t; e < 256u; e += ROUTE_THREADS) part += e < n_expert ? exp(route_prob[e] - mx) : 0.0;
    float sum = route_reduce(part, false);
    for (uint e = t; e < 256u; e += ROUTE_THREADS) route_prob[e] = e < n_expert ? exp(route_prob[e] - mx) / sum : -1.0;
    // Valid ids in every slot even if NaN logits leave ranks unfilled: an id past the experts
    // would send the expert products outside their weights.
    if (t < 64u) {
        route_chosen[t] = min(t, n_expert - 1u);
        route_chosen_p[t] = 0.0;
    }
    barrier();
    for (uint e = t; e < n_expert; e += ROUTE_THREADS) {
        // Larger probability first; on a tie, the lower expert id.
        float pt = route_prob[e];
        uint rank = 0u;
        for (uint j = 0u; j < n_expert; j++) {
            float pj = route_prob[j];
            rank += (pj > pt || (pj == pt && j < e)) ? 1u : 0u;
        }
        if (rank < n_used) {
            route_chosen[rank] = e;
            route_chosen_p[rank] = pt;
        }
    }
    barrier();
    if (t != 0u) return;
    // Renormalise over the choices in rank order (as the CPU tier sums them), then sort the
    // ids ascending (n_used is small).
    float total = 0.0;
    for (uint k = 0u; k < n_used; k++) total += route_chosen_p[k];
    for (uint a = 1u; a < n_used; a++) {
        uint x = route_chosen[a];
        float xp = route_chosen_p[a];
        uint b = a;
        for (; b > 0u && route_chosen[b - 1u] > x; b--) {
            route_chosen[b] = route_chosen[b - 1u];
            route_chosen_p[b] = route_chosen_p[b - 1u];
        }
        route_chosen[b] = x;
        route_chosen_p[b] = xp;
    }
    for (uint k = 0u; k < n_used; k++) {
        ids.v[r * n_used + k] = int(route_chosen[k]);
        weights.v[r * n_used + k] = route_chosen_p[k] / total;
    }
}
