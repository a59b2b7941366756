//! The KV page pool in host memory: keys and values in f16 (as llama.cpp keeps them: half the
//! memory and half the bandwidth of f32, which decode attention is bound by), page-major so
//! that one page (all layers, K and V) is one contiguous range — the unit of copy-on-write
//! and swapping.

/// Page-major KV storage.
pub struct KvPool {
    data: Vec<u16>,
    /// Pages.
    pub n_pages: u32,
    /// Tokens per page.
    pub page_size: u32,
    n_layer: usize,
    kv_dim: usize,
}

impl KvPool {
    /// Allocates `n_pages` zeroed pages, or `None` if the size overflows or allocation fails.
    pub fn new(n_pages: u32, page_size: u32, n_layer: usize, kv_dim: usize) -> Option<KvPool> {
        let per_page = n_layer.checked_mul(2)?.checked_mul(page_size as usize)?.checked_mul(kv_dim)?;
        let total = per_page.checked_mul(n_pages as usize)?;
        if total == 0 {
            return None;
        }
        let layout = std::alloc::Layout::array::<u16>(total).ok()?;
        // Zeroed allocation: the OS hands out zero pages lazily, so a large pool costs nothing
        // until it is used, and failure is an error instead of an abort.
        // SAFETY: layout is non-zero sized; the pointer is checked; all-zero bits are +0.0 in f16.
        let data = unsafe {
            let ptr = std::alloc::alloc_zeroed(layout) as *mut u16;
            if ptr.is_null() {
                return None;
            }
            Vec::from_raw_parts(ptr, total, total)
        };
        Some(KvPool { data, n_pages, page_size, n_layer, kv_dim })
    }

    /// f16 values per page.
    pub fn values_per_page(&self) -> usize {
        self.n_layer * 2 * self.page_size as usize * self.kv_dim
    }

    fn offset(&self, page: u32, layer: usize, which: usize, slot: usize) -> usize {
        ((page as usize * self.n_layer + layer) * 2 + which) * self.page_size as usize * self.kv_dim
            + slot * self.kv_dim
    }

    /// The key (which = 0) or value (which = 1) row of `layer` at a position, through a page
    /// table. The caller has validated the page table against the pool.
    #[inline]
    pub fn row(&self, pages: &[u32], layer: usize, which: usize, pos: usize) -> &[u16] {
        let ps = self.page_size as usize;
        let o = self.offset(pages[pos / ps], layer, which, pos % ps);
        &self.data[o..o + self.kv_dim]
    }

    /// Writable key or value row.
    #[inline]
    pub fn row_mut(&mut self, pages: &[u32], layer: usize, which: usize, pos: usize) -> &mut [u16] {
        let ps = self.page_size as usize;
        let o = self.offset(pages[pos / ps], layer, which, pos % ps);
        &mut self.data[o..o + self.kv_dim]
    }

    /// One whole page.
    pub fn page(&self, page: u32) -> &[u16] {
        let n = self.values_per_page();
        &self.data[page as usize * n..(page as usize + 1) * n]
    }

    /// One whole page, writable.
    pub fn page_mut(&mut self, page: u32) -> &mut [u16] {
        let n = self.values_per_page();
        &mut self.data[page as usize * n..(page as usize + 1) * n]
    }
}
