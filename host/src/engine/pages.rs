//! The KV page allocator and prefix cache.
//!
//! Pages are fixed-size slots of the backend's KV pool. Each has a refcount and an owner (the
//! tenant whose request filled it). A free page is in an O(1) free list. A *full* page can be
//! published in the prefix cache under its [`PageKey`] (scope, the previous page's digest, its
//! tokens); the scope is the owning tenant unless the page lies inside a prefix declared
//! shared, so one tenant never hits another's private pages (a cache hit is a timing signal).
//! The cache is indexed by a digest keyed with a secret drawn at start-up, and a hit compares
//! the whole key: a client that sends token ids cannot search for colliding prompts offline,
//! and a collision that happened anyway would be a miss, never another prompt's pages. A
//! cached page whose refcount drops to zero stays cached and evictable, least recently used
//! first.

use std::{
    collections::{BTreeMap, HashMap},
    hash::{BuildHasher, Hash, RandomState},
    sync::OnceLock,
};

/// Who a page's contents may be shared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Only requests of this tenant.
    Tenant(u32),
    /// Every tenant (a prefix declared shared by configuration).
    Shared,
}

/// What a cached page holds: who may share it, the digest of the page before it (0 for a
/// prompt's first page), and its tokens. A *partial* page ends a shared prefix mid-page; its
/// key never equals a full page's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    scope: Scope,
    parent: u64,
    partial: bool,
    tokens: Vec<u32>,
}

impl PageKey {
    /// The key of a full page.
    pub fn full(scope: Scope, parent: u64, tokens: &[u32]) -> PageKey {
        PageKey { scope, parent, partial: false, tokens: tokens.to_vec() }
    }

    /// The key of the page that holds the tail of a shared prefix ending mid-page.
    pub fn partial(parent: u64, tokens: &[u32]) -> PageKey {
        PageKey { scope: Scope::Shared, parent, partial: true, tokens: tokens.to_vec() }
    }

    /// The key's digest under this process's secret, which the next page's key names as its
    /// parent.
    pub fn digest(&self) -> u64 {
        static SECRET: OnceLock<RandomState> = OnceLock::new();
        SECRET.get_or_init(RandomState::new).hash_one(self)
    }
}

/// A page's bookkeeping.
#[derive(Debug, Clone, Default)]
struct PageMeta {
    refs: u32,
    owner: Option<u32>,
    /// The key it is cached under.
    key: Option<PageKey>,
    /// LRU stamp while cached and unreferenced.
    lru: Option<u64>,
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Prefix-cache lookups (one per full prompt page looked up).
    pub queries: u64,
    /// Lookups that found a page.
    pub hits: u64,
    /// Cached pages evicted to make room.
    pub evictions: u64,
}

/// The allocator.
#[derive(Debug)]
pub struct PagePool {
    meta: Vec<PageMeta>,
    free: Vec<u32>,
    cache: HashMap<u64, u32>,
    lru: BTreeMap<u64, u32>,
    clock: u64,
    /// Counters.
    pub stats: PageStats,
}

impl PagePool {
    /// A pool of `n` pages, all free.
    pub fn new(n: u32) -> PagePool {
        PagePool {
            meta: vec![PageMeta::default(); n as usize],
            free: (0..n).rev().collect(),
            cache: HashMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
            stats: PageStats::default(),
        }
    }

    /// Pages in the pool.
    pub fn capacity(&self) -> u32 {
        self.meta.len() as u32
    }

    /// Pages that can be allocated now (free, or cached and unreferenced).
    pub fn available(&self) -> u32 {
        (self.free.len() + self.lru.len()) as u32
    }

    /// Pages that hold a cached prefix and no sequence references (kept until evicted).
    pub fn cached(&self) -> u32 {
        self.lru.len() as u32
    }

    /// Pages referenced by at least one sequence.
    pub fn in_use(&self) -> u32 {
        self.capacity() - self.available()
    }

    /// Pages referenced and owned by `tenant`.
    pub fn owned_by(&self, tenant: u32) -> u32 {
        self.meta.iter().filter(|m| m.refs > 0 && m.owner == Some(tenant)).count() as u32
    }

    /// Allocates a page for `owner`, evicting the least recently used cached page if no page
    /// is free. `None` when every page is referenced.
    pub fn alloc(&mut self, owner: u32) -> Option<u32> {
        let page = match self.free.pop() {
            Some(p) => p,
            None => {
                let (&stamp, &p) = self.lru.iter().next()?;
                self.lru.remove(&stamp);
                if let Some(k) = self.meta[p as usize].key.take() {
                    self.cache.remove(&k.digest());
                }
                self.stats.evictions += 1;
                p
            }
        };
        let m = &mut self.meta[page as usize];
        *m = PageMeta { refs: 1, owner: Some(owner), key: None, lru: None };
        Some(page)
    }

    /// Drops one reference. A page reaching zero becomes evictable if cached, free otherwise.
    pub fn release(&mut self, page: u32) {
        let m = &mut self.meta[page as usize];
        debug_assert!(m.refs > 0, "double release of page {page}");
        m.refs = m.refs.saturating_sub(1);
        if m.refs == 0 {
            if m.key.is_some() {
                self.clock += 1;
                m.lru = Some(self.clock);
                self.lru.insert(self.clock, page);
            } else {
                m.owner = None;
                self.free.push(page);
            }
        }
    }

    /// Publishes a computed page under `key` (first publisher wins; a duplicate stays
    /// private).
    pub fn publish(&mut self, page: u32, key: PageKey) {
        let digest = key.digest();
        if self.cache.contains_key(&digest) || self.meta[page as usize].key.is_some() {
            return;
        }
        self.cache.insert(digest, page);
        self.meta[page as usize].key = Some(key);
    }

    /// Looks up the page cached under `key` and takes a reference to it. A page whose digest
    /// matches but whose key does not is a miss.
    pub fn lookup(&mut self, key: &PageKey) -> Option<u32> {
        self.stats.queries += 1;
        let &page = self.cache.get(&key.digest())?;
        let m = &mut self.meta[page as usize];
        if m.key.as_ref() != Some(key) {
            return None;
        }
        self.stats.hits += 1;
        if let Some(stamp) = m.lru.take() {
            self.lru.remove(&stamp);
        }
        m.refs += 1;
        Some(page)
    }

    /// Whether a page is cached under `key` now (no reference taken, not counted as a query).
    pub fn contains(&self, key: &PageKey) -> bool {
        self.cache.get(&key.digest()).is_some_and(|&p| self.meta[p as usize].key.as_ref() == Some(key))
    }

    /// Reference count of a page (for tests and checks).
    pub fn refs(&self, page: u32) -> u32 {
        self.meta[page as usize].refs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_and_release_are_o1_and_return_every_page() {
        let mut p = PagePool::new(4);
        let got: Vec<u32> = (0..4).map(|_| p.alloc(1).unwrap()).collect();
        assert_eq!(p.alloc(1), None, "a full pool must refuse, not panic");
        assert_eq!(p.owned_by(1), 4);
        for g in got {
            p.release(g);
        }
        assert_eq!(p.available(), 4);
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn cached_pages_are_reused_then_evicted_lru_first() {
        let mut p = PagePool::new(2);
        let a = p.alloc(1).unwrap();
        let b = p.alloc(1).unwrap();
        let (ka, kb) = (PageKey::full(Scope::Tenant(1), 0, &[1, 2]), PageKey::full(Scope::Tenant(1), 0, &[3, 4]));
        p.publish(a, ka.clone());
        p.publish(b, kb.clone());
        p.release(a);
        p.release(b);
        assert_eq!(p.available(), 2);
        assert_eq!(p.lookup(&ka), Some(a), "an unreferenced cached page is still a hit");
        assert_eq!(p.refs(a), 1);
        // Only b is evictable now; allocating takes it and forgets its key.
        assert_eq!(p.alloc(2), Some(b));
        assert_eq!(p.lookup(&kb), None);
        assert_eq!(p.stats.evictions, 1);
        assert_eq!(p.stats.hits, 1);
        assert_eq!(p.stats.queries, 2);
    }

    #[test]
    fn scopes_separate_tenants_unless_shared() {
        let t = [5, 6, 7];
        let d = |k: PageKey| k.digest();
        assert_ne!(d(PageKey::full(Scope::Tenant(1), 0, &t)), d(PageKey::full(Scope::Tenant(2), 0, &t)));
        assert_ne!(d(PageKey::full(Scope::Shared, 0, &t)), d(PageKey::full(Scope::Tenant(1), 0, &t)));
        assert_ne!(d(PageKey::full(Scope::Shared, 1, &t)), d(PageKey::full(Scope::Shared, 0, &t)), "the parent counts");
        assert_ne!(d(PageKey::partial(0, &t)), d(PageKey::full(Scope::Shared, 0, &t)), "a partial page is its own key");
    }

    #[test]
    fn a_digest_collision_is_a_miss_not_another_tenants_page() {
        // Forge a collision: another tenant's key cached under this key's digest.
        let mut p = PagePool::new(2);
        let theirs = p.alloc(2).unwrap();
        let (mine, other) = (PageKey::full(Scope::Tenant(1), 0, &[1, 2]), PageKey::full(Scope::Tenant(2), 0, &[1, 2]));
        p.cache.insert(mine.digest(), theirs);
        p.meta[theirs as usize].key = Some(other);
        assert_eq!(p.lookup(&mine), None);
        assert_eq!((p.stats.queries, p.stats.hits, p.refs(theirs)), (1, 0, 1));
    }
}
