//! The KV cache as the scheduler manages it: each request's pages ([`SeqKv`]) and the one
//! [`KvManager`] that hands them out of the page pool, matches and publishes prompt pages in
//! the prefix cache (copying the page that holds a shared prefix's tail), and swaps a
//! preempted request's pages to host memory within a budget. The engine decides who gets
//! memory; this type keeps the pages, the cache and the swap bytes consistent.
//!
//! With window pages (`zinc_plugin_api::kv`: a second page class for the sliding-window
//! layers), every position's page has a window page beside it until every window has left
//! it: [`KvManager::slide`] then frees it (or leaves it in the prefix cache, evictable), so a
//! long sequence holds its full-attention pages and about one window of the others.

use super::pages::{PageKey, PagePool, Scope};
use super::sequence::check;
use anyhow::Result;
use zinc_plugin_api::{first_window_page, BackendBox, PageCopy, NO_PAGE};

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
    /// With window pages: the window page beside each of `pages` (global ids), [`NO_PAGE`]
    /// where every window has left it. The pages held are always a suffix.
    window: Vec<u32>,
    /// The pages' contents while preempted to host memory, and how many full pages and
    /// window pages (the last ones) they hold.
    swapped: Option<Swapped>,
}

/// A preempted request's pages in host memory.
#[derive(Debug)]
struct Swapped {
    data: Vec<u8>,
    pages: usize,
    window_pages: usize,
}

impl SeqKv {
    /// The request's pages, in position order.
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }

    /// The window pages beside [`SeqKv::pages`], [`NO_PAGE`] where freed; empty without
    /// window pages.
    pub fn window(&self) -> &[u32] {
        &self.window
    }

    /// Whether its pages are in host memory (preempted by swap).
    pub fn is_swapped(&self) -> bool {
        self.swapped.is_some()
    }

    /// Window pages it holds now.
    pub fn window_held(&self) -> usize {
        self.window.iter().filter(|&&p| p != NO_PAGE).count()
    }
}

/// The second page class: pages for the sliding-window layers, global ids from `first_id`.
struct WindowPages {
    pool: PagePool,
    first_id: u32,
    /// The model's widest window, in keys.
    keys: u32,
}

impl WindowPages {
    fn alloc(&mut self, owner: u32) -> Option<u32> {
        self.pool.alloc(owner).map(|p| p + self.first_id)
    }
    fn release(&mut self, page: u32) {
        if page != NO_PAGE {
            self.pool.release(page - self.first_id);
        }
    }
    fn lookup(&mut self, key: &PageKey) -> Option<u32> {
        self.pool.lookup(key).map(|p| p + self.first_id)
    }
    fn publish(&mut self, page: u32, key: PageKey) {
        if page != NO_PAGE {
            self.pool.publish(page - self.first_id, key);
        }
    }
}

/// The window pages of a pool: how many, where their ids start (the full pages' count), and
/// the widest window of the model.
#[derive(Debug, Clone, Copy)]
pub struct WindowSpec {
    /// Window pages.
    pub pages: u32,
    /// Global id of the first.
    pub first_id: u32,
    /// The model's widest sliding window, in keys.
    pub keys: u32,
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
    window: Option<WindowPages>,
    page_size: u32,
    /// Host memory swapped pages may take.
    swap_budget: u64,
    /// Host memory they take now.
    swapped_bytes: u64,
}

impl KvManager {
    /// A manager of `n_pages` pages of `page_size` tokens, swapping up to `swap_budget` bytes.
    pub fn new(n_pages: u32, page_size: u32, swap_budget: u64) -> KvManager {
        KvManager { pool: PagePool::new(n_pages), window: None, page_size, swap_budget, swapped_bytes: 0 }
    }

    /// The same with window pages beside the full ones (none when `window.pages` is 0).
    pub fn with_window(n_pages: u32, page_size: u32, swap_budget: u64, window: WindowSpec) -> KvManager {
        // Without windows to slide there is nothing to free: every layer keeps whole pages.
        let window = (window.pages > 0 && window.keys > 0).then(|| WindowPages {
            pool: PagePool::new(window.pages),
            first_id: window.first_id,
            keys: window.keys,
        });
        KvManager { window, ..KvManager::new(n_pages, page_size, swap_budget) }
    }

    /// The page pool, for its counts and cache statistics.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// The window pages' pool, if the pool has them.
    pub fn window_pool(&self) -> Option<&PagePool> {
        self.window.as_ref().map(|w| &w.pool)
    }

    /// Pages that can be given now: every new position's page takes a full page and, with
    /// window pages, a window page too, so the scarcer class counts.
    pub fn available(&self) -> u32 {
        let full = self.pool.available();
        self.window.as_ref().map_or(full, |w| full.min(w.pool.available()))
    }

    /// Frees the window pages of `kv` that every window has left, its next step's first query
    /// being at position `n_past` (they stay in the prefix cache if published).
    pub fn slide(&mut self, kv: &mut SeqKv, n_past: u32) {
        let Some(w) = self.window.as_mut() else { return };
        let first = (first_window_page(w.keys, n_past, self.page_size) as usize).min(kv.window.len());
        // The pages held are a suffix: walk back from the window's start to the last one freed
        // before, not over every freed entry at every step.
        for p in kv.window[..first].iter_mut().rev().take_while(|p| **p != NO_PAGE) {
            w.release(*p);
            *p = NO_PAGE;
        }
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
            let Some(p) = self.pool.alloc(tenant) else { return false };
            if let Some(w) = self.window.as_mut() {
                let Some(wp) = w.alloc(tenant) else {
                    self.pool.release(p);
                    return false;
                };
                kv.window.push(wp);
            }
            kv.pages.push(p);
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
        let mut keys = Vec::new();
        for p in 0..full {
            let key = PageKey::full(prompt.scope(p, ps), parent, &prompt.tokens[p * ps..(p + 1) * ps]);
            let Some(page) = self.pool.lookup(&key) else { break };
            parent = key.digest();
            kv.pages.push(page);
            kv.hashes.push(parent);
            keys.push(key);
        }
        self.match_window(kv, &keys);
        let mut tokens = (kv.pages.len() * ps) as u32;
        let shared = prompt.shared_prefix;
        let shared_full = shared / ps;
        if !shared.is_multiple_of(ps) && kv.pages.len() == shared_full && shared < prompt.tokens.len() {
            let parent = kv.hashes.last().copied().unwrap_or(0);
            let key = PageKey::partial(parent, &prompt.tokens[shared_full * ps..shared]);
            if self.copy_shared_tail(kv, &key, prompt.tenant, mover) {
                kv.partial_published = true;
                tokens = shared as u32;
            }
        }
        Matched { tokens }
    }

    /// With window pages: gives `kv`, whose leading full pages were just matched under
    /// `keys`, the cached window pages that its first query's window reads, and gives back
    /// the matched pages from the first whose window page is needed and gone (the match ends
    /// there, which may need earlier window pages, hence the loop).
    fn match_window(&mut self, kv: &mut SeqKv, keys: &[PageKey]) {
        let Some(w) = self.window.as_mut() else { return };
        let ps = self.page_size;
        let mut m = kv.pages.len();
        loop {
            let lo = (first_window_page(w.keys, (m as u32) * ps, ps) as usize).min(m);
            match (lo..m).find(|&p| !w.pool.contains(&keys[p])) {
                Some(p) => m = p,
                None => break,
            }
        }
        for p in kv.pages.drain(m..) {
            self.pool.release(p);
        }
        kv.hashes.truncate(m);
        let lo = first_window_page(w.keys, (m as u32) * ps, ps) as usize;
        kv.window = (0..m).map(|p| if p < lo { NO_PAGE } else { w.lookup(&keys[p]).expect("checked above") }).collect();
    }

    /// Copies the page cached under the shared tail's `key` (and its window page) into new
    /// pages of `kv` owned by `tenant` (copy-on-write). False, with nothing taken, when it is
    /// not cached or the copy cannot be made.
    fn copy_shared_tail(&mut self, kv: &mut SeqKv, key: &PageKey, tenant: u32, mover: &mut dyn PageMover) -> bool {
        if self.window.as_ref().is_some_and(|w| !w.pool.contains(key)) {
            return false;
        }
        let Some(src) = self.pool.lookup(key) else { return false };
        let window_src = self.window.as_mut().and_then(|w| w.lookup(key));
        let dst = self.pool.alloc(tenant);
        let window_dst = self.window.as_mut().and_then(|w| w.alloc(tenant));
        let mut copies: Vec<PageCopy> = dst.map(|d| PageCopy { src, dst: d }).into_iter().collect();
        copies.extend(window_src.zip(window_dst).map(|(src, dst)| PageCopy { src, dst }));
        let complete = dst.is_some() && window_src.is_some() == window_dst.is_some();
        let copied = match complete {
            true => mover.copy_pages(copies),
            false => Err(anyhow::anyhow!("no page free for the copy")),
        };
        self.pool.release(src);
        if let Some(w) = self.window.as_mut() {
            window_src.into_iter().for_each(|p| w.release(p));
        }
        match copied {
            Ok(()) => {
                kv.pages.push(dst.expect("complete"));
                if let Some(wd) = window_dst {
                    kv.window.push(wd);
                }
                true
            }
            Err(e) => {
                dst.into_iter().for_each(|d| self.pool.release(d));
                if let Some(w) = self.window.as_mut() {
                    window_dst.into_iter().for_each(|p| w.release(p));
                }
                tracing::debug!("shared-prefix copy skipped: {e:#}");
                false
            }
        }
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
                if let Some(w) = self.window.as_mut() {
                    w.publish(kv.window[shared_full], key.clone());
                }
                self.pool.publish(kv.pages[shared_full], key);
                kv.partial_published = true;
            }
        }
        for (page, key, h) in new {
            if let Some(w) = self.window.as_mut() {
                w.publish(kv.window[kv.hashes.len()], key.clone());
            }
            self.pool.publish(page, key);
            kv.hashes.push(h);
        }
    }

    /// Frees everything `kv` holds: its pages (published ones stay in the cache until
    /// evicted) and its swapped copy.
    pub fn release(&mut self, kv: &mut SeqKv) {
        self.release_pages(kv);
        if let Some(d) = kv.swapped.take() {
            self.swapped_bytes -= d.data.len() as u64;
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
            let held: Vec<u32> = kv.window.iter().copied().filter(|&p| p != NO_PAGE).collect();
            let data = mover.swap_out(kv.pages.iter().copied().chain(held.iter().copied()).collect())?;
            if self.swapped_bytes + data.len() as u64 <= self.swap_budget {
                self.swapped_bytes += data.len() as u64;
                kv.swapped = Some(Swapped { data, pages: kv.pages.len(), window_pages: held.len() });
                swapped = true;
            }
        }
        self.release_pages(kv);
        if !swapped {
            kv.hashes.clear();
        }
        Ok(swapped)
    }

    /// Gives back every page `kv` holds, full and window.
    fn release_pages(&mut self, kv: &mut SeqKv) {
        for p in kv.pages.drain(..) {
            self.pool.release(p);
        }
        if let Some(w) = self.window.as_mut() {
            kv.window.drain(..).for_each(|p| w.release(p));
        }
    }

    /// Gives a swapped `kv` its pages back (as many as it held), owned by `tenant`. Returns
    /// false (and changes nothing) while the pool lacks them; true at once for a request that
    /// is not swapped.
    pub fn swap_in(&mut self, kv: &mut SeqKv, tenant: u32, mover: &mut dyn PageMover) -> Result<bool> {
        let Some(swapped) = kv.swapped.as_ref() else { return Ok(true) };
        let (n, held) = (swapped.pages, swapped.window_pages);
        let window_short = self.window.as_ref().is_some_and(|w| (w.pool.available() as usize) < held);
        if (self.pool.available() as usize) < n || window_short {
            return Ok(false);
        }
        let pages: Vec<u32> = (0..n).map(|_| self.pool.alloc(tenant).expect("checked available")).collect();
        let window: Vec<u32> = match self.window.as_mut() {
            Some(w) => {
                let new = (0..held).map(|_| w.alloc(tenant).expect("checked available"));
                std::iter::repeat_n(NO_PAGE, n - held).chain(new).collect()
            }
            None => Vec::new(),
        };
        let ids = pages.iter().copied().chain(window.iter().copied().filter(|&p| p != NO_PAGE)).collect();
        let data = kv.swapped.as_ref().expect("checked").data.clone();
        if let Err(e) = mover.swap_in(ids, data) {
            let mut taken = SeqKv { pages, window, ..SeqKv::default() };
            self.release_pages(&mut taken);
            return Err(e);
        }
        self.swapped_bytes -= kv.swapped.take().map_or(0, |d| d.data.len() as u64);
        kv.pages = pages;
        kv.window = window;
        // Swapped pages come back private: their cache entries were dropped with the pages.
        kv.hashes.clear();
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
