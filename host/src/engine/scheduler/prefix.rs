//! The prefix cache as the engine uses it: matching a new request's leading pages, copying
//! the tail page of a shared prefix that ends mid-page, and publishing computed pages.

use super::*;

impl Engine {
    /// Matches leading full prompt pages in the prefix cache (at least one prompt token is
    /// always left to compute, for the logits).
    pub(super) fn match_prefix(&mut self, i: usize) -> anyhow::Result<()> {
        let ps = self.cfg.page_size as usize;
        let a = &self.active[i];
        let full = (a.req.prompt.len() - 1) / ps;
        let (tenant, shared) = (a.req.tenant, a.req.shared_prefix);
        let prompt = a.req.prompt.clone();
        let mut parent = 0u64;
        let mut found = Vec::new();
        for p in 0..full {
            let scope = if (p + 1) * ps <= shared { Scope::Shared } else { Scope::Tenant(tenant) };
            let key = PageKey::full(scope, parent, &prompt[p * ps..(p + 1) * ps]);
            let h = key.digest();
            match self.pool.lookup(&key) {
                Some(page) => found.push((page, h)),
                None => break,
            }
            parent = h;
        }
        let a = &mut self.active[i];
        let matched = found.len();
        for (page, h) in found {
            a.pages.push(page);
            a.hashes.push(h);
            a.n_computed += ps as u32;
            a.cached_tokens += ps as u32;
        }
        // A shared prefix that ends mid-page: copy the page that holds its tail from the
        // request that computed it (copy-on-write), then compute on from the prefix's end.
        let shared_full = shared / ps;
        if shared % ps != 0 && matched == shared_full && shared < prompt.len() {
            let key = PageKey::partial(parent, &prompt[shared_full * ps..shared]);
            if let Some(src) = self.pool.lookup(&key) {
                let dst = self.pool.alloc(tenant);
                let copied = match dst {
                    Some(d) => check(self.backend.copy_pages(vec![PageCopy { src, dst: d }].into())).map(|_| d),
                    None => Err(anyhow::anyhow!("no page free for the copy")),
                };
                self.pool.release(src);
                match copied {
                    Ok(d) => {
                        let a = &mut self.active[i];
                        a.pages.push(d);
                        a.cached_tokens += (shared - shared_full * ps) as u32;
                        a.n_computed = shared as u32;
                        a.partial_published = true;
                    }
                    Err(e) => {
                        if let Some(d) = dst {
                            self.pool.release(d);
                        }
                        tracing::debug!("shared-prefix copy skipped: {e:#}");
                    }
                }
            }
        }
        Ok(())
    }

    /// Publishes newly completed full prompt pages, and the page holding the tail of a shared
    /// prefix that ends mid-page. A page carries one key: the shared tail's key wins over the
    /// full-page key of the same page (it serves every tenant, not only this prompt's owner).
    pub(super) fn publish(&mut self, i: usize) {
        let ps = self.cfg.page_size as usize;
        let a = &self.active[i];
        let done = (a.n_computed as usize).min(a.req.prompt.len()) / ps;
        let shared = a.req.shared_prefix;
        let shared_full = shared / ps;
        let mut new = Vec::new();
        let mut parent = a.hashes.last().copied().unwrap_or(0);
        let mut partial = None;
        for p in a.hashes.len()..done.max(a.hashes.len()) {
            let scope = if (p + 1) * ps <= shared { Scope::Shared } else { Scope::Tenant(a.req.tenant) };
            let key = PageKey::full(scope, parent, &a.req.prompt[p * ps..(p + 1) * ps]);
            parent = key.digest();
            new.push((a.pages[p], key, parent));
        }
        if !shared.is_multiple_of(ps)
            && !a.partial_published
            && a.n_computed as usize >= shared
            && a.pages.len() > shared_full
        {
            // The parent chain up to the tail page is known once its full pages are hashed.
            let chain: Vec<u64> = a.hashes.iter().copied().chain(new.iter().map(|x| x.2)).collect();
            if chain.len() >= shared_full {
                let parent = if shared_full == 0 { 0 } else { chain[shared_full - 1] };
                partial =
                    Some((a.pages[shared_full], PageKey::partial(parent, &a.req.prompt[shared_full * ps..shared])));
            }
        }
        if let Some((page, key)) = partial {
            self.pool.publish(page, key);
            self.active[i].partial_published = true;
        }
        for (page, key, h) in new {
            self.pool.publish(page, key);
            self.active[i].hashes.push(h);
        }
    }

    /// Undoes a prefix match for a request that could not be admitted after all.
    pub(super) fn unmatch(&mut self, i: usize) {
        let a = &mut self.active[i];
        let pages = std::mem::take(&mut a.pages);
        a.n_computed = 0;
        a.cached_tokens = 0;
        a.hashes.clear();
        a.partial_published = false;
        for p in pages {
            self.pool.release(p);
        }
    }
}
