//! What happens after a step: sampling, streaming text with stop strings held back, ending
//! requests, and the shared stats.

use super::*;

/// Length of the longest suffix of `text` that is a proper prefix of a stop string: text that
/// may still turn out to be a stop string, held back from the stream.
fn longest_stop_prefix(text: &str, stops: &[String]) -> usize {
    // Length of the longest suffix of `text` that is a proper prefix of a stop string.
    let mut best = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                best = best.max(i);
            }
        }
    }
    best
}

impl Engine {
    /// Samples the next token of request `i`, streams its text; returns how it finished.
    pub(super) fn sample(&mut self, i: usize, logits: &[f32]) -> Option<Finish> {
        let now = Instant::now();
        let model = self.model.clone();
        let a = &mut self.active[i];
        let history_start = a.req.prompt.len();
        let tok = a.sampler.sample(logits, &a.tokens, &a.tokens[history_start..]);
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        match a.last_token {
            None => stats.ttft.observe((now - a.req.arrived).as_secs_f64()),
            Some(t) => stats.itl.observe((now - t).as_secs_f64()),
        }
        drop(stats);
        a.last_token = Some(now);
        self.vtc.charge_output(a.req.band, a.req.tenant, 1);
        if model.tokenizer.is_stop(tok) && !a.req.ignore_eos {
            return Some(Finish::Stop);
        }
        a.generated += 1;
        a.tokens.push(tok);
        let piece = a.decoder.push(&model.tokenizer.token_bytes(tok, false));
        a.text.push_str(&piece);
        if let Some(at) = a.req.stop.iter().filter_map(|s| a.text.find(s.as_str())).min() {
            if at > a.emitted {
                let _ = a.req.events.send(Event::Text(a.text[a.emitted..at].to_string()));
            }
            a.emitted = at.max(a.emitted);
            return Some(Finish::Stop);
        }
        let hold = longest_stop_prefix(&a.text, &a.req.stop);
        let safe = a.text.len() - hold;
        if safe > a.emitted {
            let _ = a.req.events.send(Event::Text(a.text[a.emitted..safe].to_string()));
            a.emitted = safe;
        }
        if a.generated >= a.req.max_tokens || a.tokens.len() as u32 >= self.cfg.max_context {
            let rest = a.decoder.finish();
            a.text.push_str(&rest);
            if a.text.len() > a.emitted {
                let _ = a.req.events.send(Event::Text(a.text[a.emitted..].to_string()));
                a.emitted = a.text.len();
            }
            return Some(Finish::Length);
        }
        None
    }

    /// Releases a request's pages and tells its client how it ended.
    pub(super) fn finish(&mut self, i: usize, finish: Finish) {
        let a = self.active.swap_remove(i);
        tracing::debug!(request = a.req.id, finish = finish.label(), generated = a.generated, "request finished");
        for &p in &a.pages {
            self.pool.release(p);
        }
        if let Some(d) = &a.swapped {
            self.swapped_bytes -= d.len() as u64;
        }
        let usage = Usage {
            prompt_tokens: a.req.prompt.len() as u32,
            completion_tokens: a.generated,
            cached_tokens: a.cached_tokens,
        };
        let _ = a.req.events.send(Event::Done { finish, usage });
        let name = self.tenant_name(a.req.tenant);
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let t = s.tenant(&name);
        if a.admitted {
            t.running = t.running.saturating_sub(1);
        } else {
            t.waiting = t.waiting.saturating_sub(1);
        }
        t.requests += 1;
        t.prompt_tokens += a.req.prompt.len() as u64;
        t.completion_tokens += a.generated as u64;
        t.cached_tokens += a.cached_tokens as u64;
        if finish != Finish::Cancelled {
            s.e2e.observe(a.req.arrived.elapsed().as_secs_f64());
        }
    }

    /// Copies page usage and backend counters into the shared stats; `elapsed` is the time
    /// the current holdings were held (integrated into page-seconds).
    pub(super) fn refresh_stats(&mut self, elapsed: f64) {
        let counters = self.backend.counters();
        let mut per_tenant: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for a in &self.active {
            *per_tenant.entry(a.req.tenant).or_default() += a.pages.len() as u32;
        }
        let names: Vec<(String, u32)> = per_tenant.iter().map(|(t, p)| (self.tenant_name(*t), *p)).collect();
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.backend = counters;
        s.kv_pages_used = self.pool.in_use();
        s.prefix_queries = self.pool.stats.queries;
        s.prefix_hits = self.pool.stats.hits;
        for t in s.tenants.values_mut() {
            t.pages = 0;
        }
        for (name, pages) in names {
            let t = s.tenant(&name);
            t.pages = pages;
            t.kv_page_seconds += pages as f64 * elapsed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::longest_stop_prefix;

    #[test]
    pub(super) fn stop_prefixes_are_held_back() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(longest_stop_prefix("hello E", &stops), 1);
        assert_eq!(longest_stop_prefix("hello EN", &stops), 2);
        assert_eq!(longest_stop_prefix("hello\n", &stops), 1);
        assert_eq!(longest_stop_prefix("hello", &stops), 0);
    }
}
