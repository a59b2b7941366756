//! The KV cache as the scheduler manages it: each request's pages ([`SeqKv`]) and the one
//! [`KvManager`] that hands them out of the page pool, matches and publishes prompt pages in
//! the prefix cache (copying the page that holds a shared prefix's tail), and swaps a
//! preempted request's pages to host memory within a budget. The engine decides who gets
//! memory; this type keeps the pages, the cache and the swap bytes consistent.

use super::pages::{PageKey, PagePool, Scope};
use super::sequence::check;
use anyhow::Result;
use zinc_plugin_api::{BackendBox, PageCopy};

/// What the KV manager asks of the backend: moving pages' contents.
pub trait PageMover {
    /// Copies whole pages (a shared prefix's tail page, copy-on-write).
    fn copy_pages(&mut self, copies: Vec<PageCopy>) -> Result<()>;
    /// The contents of `pages`, for host memory.
    fn swap_out(&mut self, pages: Vec<u32>) -> Result<Vec<u8>>;
    /// Writes contents that [`PageMover::swap_out`] returned into `pages`.
    fn swap_in(&mut self, pages: Vec<u32>, data: Vec<u8>) -> Result<()>;
}

impl PageMover for BackendBox {
    fn copy_pages(&mut self, copies: Vec<PageCopy>) -> Result<()> {
        check(BackendBox::copy_pages(self, copies.into()))
    }
    fn swap_out(&mut self, pages: Vec<u32>) -> Result<Vec<u8>> {
        Ok(check(BackendBox::swap_out(self, pages.into()))?.into_vec())
    }
    fn swap_in(&mut self, pages: Vec<u32>, data: Vec<u8>) -> Result<()> {
        check(BackendBox::swap_in(self, pages.into(), data.into()))
    }
}

/// One request's KV state.
#[derive(Debug, Default)]
pub struct SeqKv {
    /// Pages in position order (page `p` holds positions `p·page_size ..`).
    pages: Vec<u32>,
    /// Digests of the leading full prompt pages published or matched, in order.
    hashes: Vec<u64>,
    /// Whether the page holding the tail of a shared prefix that ends mid-page was published
    /// (or copied from another request's).
    partial_published: bool,
    /// The pages' contents while preempted to host memory.
    swapped: Option<Vec<u8>>,
}

impl SeqKv {
    /// The request's pages, in position order.
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }

    /// Whether its pages are in host memory (preempted by swap).
    pub fn is_swapped(&self) -> bool {
        self.swapped.is_some()
    }
}

/// The prompt whose pages are matched or published: its tokens, its tenant (cache scope),
/// and how many leading tokens every tenant shares.
#[derive(Debug, Clone, Copy)]
pub struct PromptPages<'a> {
    /// The prompt's tokens.
    pub tokens: &'a [u32],
    /// The tenant whose scope its private pages are published in.
    pub tenant: u32,
    /// Leading tokens every tenant shares (a declared shared prefix), 0 for none.
    pub shared_prefix: usize,
}

impl PromptPages<'_> {
    /// The cache scope of full page `p` (`ps` tokens per page): pages wholly inside the
    /// shared prefix are shared by every tenant.
    fn scope(&self, p: usize, ps: usize) -> Scope {
        if (p + 1) * ps <= self.shared_prefix {
            Scope::Shared
        } else {
            Scope::Tenant(self.tenant)
        }
    }
}

/// What a prefix match found: tokens whose keys and values are already in the request's
/// pages (computation resumes there), all of them from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Matched {
    /// Positions already computed: the matched pages' tokens, or up to a copied shared tail.
    pub tokens: u32,
}

/// The page pool with the prefix cache and the swap budget.
pub struct KvManager {
    pool: PagePool,
    page_size: u32,
    /// Host memory swapped pages may take.
    swap_budget: u64,
    /// Host memory they take now.
    swapped_bytes: u64,
}

impl KvManager {
    /// A manager of `n_pages` pages of `page_size` tokens, swapping up to `swap_budget` bytes.
    pub fn new(n_pages: u32, page_size: u32, swap_budget: u64) -> KvManager {
        KvManager { pool: PagePool::new(n_pages), page_size, swap_budget, swapped_bytes: 0 }
    }

    /// The page pool, for its counts and cache statistics.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// Pages free or evictable from the cache.
    pub fn available(&self) -> u32 {
        self.pool.available()
    }

    /// Host memory swapped pages hold.
    pub fn swapped_bytes(&self) -> u64 {
        self.swapped_bytes
    }

    /// Pages `kv` lacks to hold `tokens` positions.
    pub fn pages_needed(&self, kv: &SeqKv, tokens: u32) -> u32 {
        tokens.div_ceil(self.page_size).saturating_sub(kv.pages.len() as u32)
    }

    /// Gives `kv` `need` more pages owned by `tenant`; false if the pool ran out (the pages
    /// taken so far stay with `kv`).
    pub fn grow(&mut self, kv: &mut SeqKv, tenant: u32, need: u32) -> bool {
        for _ in 0..need {
            match self.pool.alloc(tenant) {
                Some(p) => kv.pages.push(p),
                None => return false,
            }
        }
        true
    }

    /// Matches the prompt's leading full pages in the prefix cache into `kv` (an empty
    /// request's), leaving at least one prompt token to compute (for the logits). A shared
    /// prefix that ends mid-page has its tail page copied from the request that computed it
    /// (copy-on-write), so computation resumes at the prefix's end.
    pub fn match_prefix(&mut self, kv: &mut SeqKv, prompt: PromptPages, mover: &mut dyn PageMover) -> Matched {
        let ps = self.page_size as usize;
        let full = prompt.tokens.len().saturating_sub(1) / ps;
        let mut parent = 0u64;
        for p in 0..full {
            let key = PageKey::full(prompt.scope(p, ps), parent, &prompt.tokens[p * ps..(p + 1) * ps]);
            let Some(page) = self.pool.lookup(&key) else { break };
            parent = key.digest();
            kv.pages.push(page);
            kv.hashes.push(parent);
        }
        let mut tokens = (kv.pages.len() * ps) as u32;
        let shared = prompt.shared_prefix;
        let shared_full = shared / ps;
        if !shared.is_multiple_of(ps) && kv.pages.len() == shared_full && shared < prompt.tokens.len() {
            let key = PageKey::partial(parent, &prompt.tokens[shared_full * ps..shared]);
            if let Some(src) = self.pool.lookup(&key) {
                let dst = self.pool.alloc(prompt.tenant);
                let copied = match dst {
                    Some(d) => mover.copy_pages(vec![PageCopy { src, dst: d }]).map(|_| d),
                    None => Err(anyhow::anyhow!("no page free for the copy")),
                };
                self.pool.release(src);
                match copied {
                    Ok(d) => {
                        kv.pages.push(d);
                        kv.partial_published = true;
                        tokens = shared as u32;
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
        Matched { tokens }
    }

    /// Publishes the prompt pages of `kv` completed by `computed` tokens, and the page holding
    /// the tail of a shared prefix that ends mid-page. A page carries one key: the shared
    /// tail's key wins over the full-page key of the same page (it serves every tenant, not
    /// only this prompt's owner).
    pub fn publish(&mut self, kv: &mut SeqKv, prompt: PromptPages, computed: u32) {
        let ps = self.page_size as usize;
        let done = (computed as usize).min(prompt.tokens.len()) / ps;
        let shared = prompt.shared_prefix;
        let shared_full = shared / ps;
        let mut new = Vec::new();
        let mut parent = kv.hashes.last().copied().unwrap_or(0);
        for p in kv.hashes.len()..done.max(kv.hashes.len()) {
            let key = PageKey::full(prompt.scope(p, ps), parent, &prompt.tokens[p * ps..(p + 1) * ps]);
            parent = key.digest();
            new.push((kv.pages[p], key, parent));
        }
        let tail_ready = computed as usize >= shared && kv.pages.len() > shared_full;
        if !shared.is_multiple_of(ps) && !kv.partial_published && tail_ready {
            // The parent chain up to the tail page is known once its full pages are hashed.
            let chain: Vec<u64> = kv.hashes.iter().copied().chain(new.iter().map(|x| x.2)).collect();
            if chain.len() >= shared_full {
                let parent = if shared_full == 0 { 0 } else { chain[shared_full - 1] };
                let key = PageKey::partial(parent, &prompt.tokens[shared_full * ps..shared]);
                self.pool.publish(kv.pages[shared_full], key);
                kv.partial_published = true;
            }
        }
        for (page, key, h) in new {
            self.pool.publish(page, key);
            kv.hashes.push(h);
        }
    }

    /// Frees everything `kv` holds: its pages (published ones stay in the cache until
    /// evicted) and its swapped copy.
    pub fn release(&mut self, kv: &mut SeqKv) {
        for p in kv.pages.drain(..) {
            self.pool.release(p);
        }
        if let Some(d) = kv.swapped.take() {
            self.swapped_bytes -= d.len() as u64;
        }
        kv.hashes.clear();
        kv.partial_published = false;
    }

    /// Preempts `kv`: its pages go to host memory while the swap budget allows, and are freed
    /// either way. Returns whether they were swapped; if not, the request recomputes from its
    /// first token (its published pages may still serve it from the cache).
    pub fn swap_out(&mut self, kv: &mut SeqKv, mover: &mut dyn PageMover) -> Result<bool> {
        let mut swapped = false;
        if !kv.pages.is_empty() && self.swapped_bytes < self.swap_budget {
            let data = mover.swap_out(kv.pages.clone())?;
            if self.swapped_bytes + data.len() as u64 <= self.swap_budget {
                self.swapped_bytes += data.len() as u64;
                kv.swapped = Some(data);
                swapped = true;
            }
        }
        for p in kv.pages.drain(..) {
            self.pool.release(p);
        }
        if !swapped {
            kv.hashes.clear();
        }
        Ok(swapped)
    }

    /// Gives a swapped `kv` pages for its `tokens` computed positions back, owned by `tenant`.
    /// Returns false (and changes nothing) while the pool lacks them; true at once for a
    /// request that is not swapped.
    pub fn swap_in(&mut self, kv: &mut SeqKv, tokens: u32, tenant: u32, mover: &mut dyn PageMover) -> Result<bool> {
        let Some(data) = kv.swapped.as_ref() else { return Ok(true) };
        let n = tokens.div_ceil(self.page_size);
        if self.pool.available() < n {
            return Ok(false);
        }
        let pages: Vec<u32> = (0..n).map(|_| self.pool.alloc(tenant).expect("checked available")).collect();
        mover.swap_in(pages.clone(), data.clone())?;
        self.swapped_bytes -= kv.swapped.take().map_or(0, |d| d.len() as u64);
        kv.pages = pages;
        // Swapped pages come back private: their cache entries were dropped with the pages.
        kv.hashes.clear();
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that records page moves and swaps 8 bytes per page.
    #[derive(Default)]
    struct Mover {
        copies: Vec<PageCopy>,
        fail_copies: bool,
    }

    impl PageMover for Mover {
        fn copy_pages(&mut self, copies: Vec<PageCopy>) -> Result<()> {
            anyhow::ensure!(!self.fail_copies, "copy refused");
            self.copies.extend(copies);
            Ok(())
        }
        fn swap_out(&mut self, pages: Vec<u32>) -> Result<Vec<u8>> {
            Ok(vec![0; pages.len() * 8])
        }
        fn swap_in(&mut self, _: Vec<u32>, _: Vec<u8>) -> Result<()> {
            Ok(())
        }
    }

    fn prompt(tokens: &[u32], tenant: u32, shared_prefix: usize) -> PromptPages<'_> {
        PromptPages { tokens, tenant, shared_prefix }
    }

    /// A request that computed `computed` tokens of `p` and published its pages.
    fn computed(kv: &mut KvManager, p: PromptPages, computed: u32) -> SeqKv {
        let mut seq = SeqKv::default();
        let need = kv.pages_needed(&seq, computed);
        assert!(kv.grow(&mut seq, p.tenant, need));
        kv.publish(&mut seq, p, computed);
        seq
    }

    #[test]
    fn full_prompt_pages_match_in_their_tenants_scope_and_leave_a_token_to_compute() {
        let mut kv = KvManager::new(16, 4, 0);
        let tokens: Vec<u32> = (0..12).collect();
        let mut first = computed(&mut kv, prompt(&tokens, 1, 0), 12);
        let mut mover = Mover::default();
        // The same 12 tokens: two full pages match, the third holds the last token's logits.
        let mut again = SeqKv::default();
        assert_eq!(kv.match_prefix(&mut again, prompt(&tokens, 1, 0), &mut mover), Matched { tokens: 8 });
        assert_eq!(again.pages(), &first.pages()[..2]);
        // Another tenant sees nothing of a prompt that shares no prefix.
        let mut other = SeqKv::default();
        assert_eq!(kv.match_prefix(&mut other, prompt(&tokens, 2, 0), &mut mover), Matched { tokens: 0 });
        // Released pages stay cached and match until evicted.
        kv.release(&mut first);
        kv.release(&mut again);
        let mut later = SeqKv::default();
        assert_eq!(kv.match_prefix(&mut later, prompt(&tokens, 1, 0), &mut mover).tokens, 8);
        kv.release(&mut later);
        assert_eq!(kv.pool().in_use(), 0);
    }

    #[test]
    fn a_shared_prefix_ending_mid_page_is_copied_for_another_tenant() {
        let mut kv = KvManager::new(16, 4, 0);
        let a: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 70, 71, 72];
        let b: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 80, 81, 82];
        let owner = computed(&mut kv, prompt(&a, 1, 6), 9);
        let mut mover = Mover::default();
        let mut seq = SeqKv::default();
        // Page 0 is shared whole; the copy of page 1 holds tokens 4 and 5 of the prefix.
        assert_eq!(kv.match_prefix(&mut seq, prompt(&b, 2, 6), &mut mover), Matched { tokens: 6 });
        assert_eq!(seq.pages()[0], owner.pages()[0]);
        assert_eq!(mover.copies.len(), 1);
        assert_eq!((mover.copies[0].src, mover.copies[0].dst), (owner.pages()[1], seq.pages()[1]));
        // A failed copy leaves the full pages matched and returns the page it took.
        let in_use = kv.pool().in_use();
        let mut refused = SeqKv::default();
        mover.fail_copies = true;
        assert_eq!(kv.match_prefix(&mut refused, prompt(&b, 3, 6), &mut mover), Matched { tokens: 4 });
        assert_eq!(refused.pages(), &owner.pages()[..1]);
        assert_eq!(kv.pool().in_use(), in_use, "the page taken for the copy went back");
    }

    #[test]
    fn preemption_swaps_within_the_budget_and_frees_pages_either_way() {
        let mut kv = KvManager::new(8, 4, 24);
        let mut mover = Mover::default();
        let tokens: Vec<u32> = (0..12).collect();
        let mut a = computed(&mut kv, prompt(&tokens, 1, 0), 12);
        let mut b = computed(&mut kv, prompt(&tokens[..8], 2, 0), 8);
        // Three pages (24 bytes) fit the budget; two more would not.
        assert!(kv.swap_out(&mut a, &mut mover).unwrap());
        assert!(!kv.swap_out(&mut b, &mut mover).unwrap());
        assert_eq!((kv.pool().in_use(), kv.swapped_bytes()), (0, 24));
        assert!(a.is_swapped() && a.pages().is_empty() && !b.is_swapped());
        // Back in when the pool has room; a request that was not swapped needs nothing.
        let hold: Vec<SeqKv> = (0..2).map(|t| computed(&mut kv, prompt(&tokens[..12], 10 + t, 0), 12)).collect();
        assert!(!kv.swap_in(&mut a, 12, 1, &mut mover).unwrap(), "two pages free, three needed");
        assert!(a.is_swapped());
        let mut hold = hold;
        kv.release(&mut hold[0]);
        assert!(kv.swap_in(&mut a, 12, 1, &mut mover).unwrap());
        assert!(kv.swap_in(&mut b, 8, 2, &mut mover).unwrap());
        assert_eq!((a.pages().len(), kv.swapped_bytes()), (3, 0));
        for s in [&mut a, &mut b, &mut hold[1]] {
            kv.release(s);
        }
        assert_eq!(kv.pool().in_use(), 0);
    }
}
