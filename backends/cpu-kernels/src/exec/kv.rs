//! The KV page pool in host memory: keys and values in f16 (as llama.cpp keeps them: half the
//! memory and half the bandwidth of f32, which decode attention is bound by), page-major so
//! that one page (its class's layers, K and V) is one contiguous range — the unit of
//! copy-on-write and swapping. Full pages come first, then the window pages of the
//! sliding-window layers when the host asked for them (`zinc_plugin_api::kv`).

use zinc_plugin_api::{KvClass, KvLayout, KvPoolInfo, KvPoolSpec, SeqChunk};

/// Page-major KV storage of one or two page classes.
pub struct KvPool {
    data: Vec<u16>,
    /// Full pages (ids `0 .. n_pages`).
    pub n_pages: u32,
    /// Window pages (ids `n_pages ..`).
    pub window_pages: u32,
    /// Tokens per page.
    pub page_size: u32,
    layout: KvLayout,
    kv_dim: usize,
    /// f16 values of a full page and of a window page (their class's layers, K and V), worked
    /// out once: every key row an attention task reads goes through them.
    page_values: [usize; 2],
    /// The model's widest sliding window, which bounds what a step may read of window tables.
    pub window_keys: u32,
}

impl KvPool {
    /// Allocates the pages `spec` asks for, zeroed, with `layout`'s layers in each class; `None`
    /// if the size overflows or allocation fails.
    pub fn new(spec: KvPoolSpec, layout: KvLayout, kv_dim: usize, window_keys: u32) -> Option<KvPool> {
        let per_layer = 2usize.checked_mul(spec.page_size as usize)?.checked_mul(kv_dim)?;
        let page_values = [
            (layout.full_layers as usize).checked_mul(per_layer)?,
            (layout.window_layers as usize).checked_mul(per_layer)?,
        ];
        let full = page_values[0].checked_mul(spec.n_pages as usize)?;
        let window = page_values[1].checked_mul(spec.window_pages as usize)?;
        let total = full.checked_add(window)?;
        if total == 0 {
            return None;
        }
        let layout_bytes = std::alloc::Layout::array::<u16>(total).ok()?;
        // Zeroed allocation: the OS hands out zero pages lazily, so a large pool costs nothing
        // until it is used, and failure is an error instead of an abort.
        // SAFETY: layout is non-zero sized; the pointer is checked; all-zero bits are +0.0 in f16.
        let data = unsafe {
            let ptr = std::alloc::alloc_zeroed(layout_bytes) as *mut u16;
            if ptr.is_null() {
                return None;
            }
            Vec::from_raw_parts(ptr, total, total)
        };
        let (n_pages, window_pages, page_size) = (spec.n_pages, spec.window_pages, spec.page_size);
        Some(KvPool { data, n_pages, window_pages, page_size, layout, kv_dim, page_values, window_keys })
    }

    /// What was allocated, as the host is told.
    pub fn info(&self) -> KvPoolInfo {
        KvPoolInfo {
            n_pages: self.n_pages,
            page_size: self.page_size,
            bytes_per_page: (self.values_per_page(KvClass::Full) * 2) as u64,
            window_pages: self.window_pages,
            bytes_per_window_page: (self.values_per_page(KvClass::Window) * 2) as u64,
        }
    }

    /// f16 values per page of `class`.
    fn values_per_page(&self, class: KvClass) -> usize {
        match class {
            KvClass::Full => self.page_values[0],
            KvClass::Window => self.page_values[1],
        }
    }

    /// The class and range of values of page `page` (either class), `None` outside the pool.
    fn page_range(&self, page: u32) -> Option<(KvClass, std::ops::Range<usize>)> {
        let (class, start) = if page < self.n_pages {
            (KvClass::Full, page as usize * self.page_values[0])
        } else if page - self.n_pages < self.window_pages {
            let base = self.n_pages as usize * self.page_values[0];
            (KvClass::Window, base + (page - self.n_pages) as usize * self.page_values[1])
        } else {
            return None;
        };
        Some((class, start..start + self.values_per_page(class)))
    }

    /// Offset of the key (which = 0) or value (which = 1) row of `layer` at `pos` of chunk `s`,
    /// through the page table of the layer's class. The caller has validated the step.
    fn offset(&self, s: &SeqChunk, layer: usize, which: usize, pos: usize) -> usize {
        let (class, slot) = self.layout.place(layer);
        let table = match class {
            KvClass::Full => &s.page_table,
            KvClass::Window => &s.window_table,
        };
        let ps = self.page_size as usize;
        let (_, range) = self.page_range(table[pos / ps]).expect("validated page table");
        range.start + ((slot as usize * 2 + which) * ps + pos % ps) * self.kv_dim
    }

    /// The key (which = 0) or value (which = 1) row of `layer` at a position of chunk `s`.
    #[inline]
    pub fn row(&self, s: &SeqChunk, layer: usize, which: usize, pos: usize) -> &[u16] {
        let o = self.offset(s, layer, which, pos);
        &self.data[o..o + self.kv_dim]
    }

    /// Writable key or value row.
    #[inline]
    pub fn row_mut(&mut self, s: &SeqChunk, layer: usize, which: usize, pos: usize) -> &mut [u16] {
        let o = self.offset(s, layer, which, pos);
        &mut self.data[o..o + self.kv_dim]
    }

    /// One whole page of either class, `None` outside the pool.
    pub fn page(&self, page: u32) -> Option<(KvClass, &[u16])> {
        let (class, r) = self.page_range(page)?;
        Some((class, &self.data[r]))
    }

    /// One whole page, writable.
    pub fn page_mut(&mut self, page: u32) -> Option<&mut [u16]> {
        let (_, r) = self.page_range(page)?;
        Some(&mut self.data[r])
    }
}
