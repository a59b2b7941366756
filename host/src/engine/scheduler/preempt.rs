//! Preemption under KV pressure: which request gives way, swapping its pages to host memory
//! or dropping them for recompute, and giving them back.

use super::*;

impl Engine {
    /// Picks the request to preempt: lowest band, then least computed; never `keep`.
    pub(super) fn victim(&self, keep: usize) -> Option<usize> {
        (0..self.active.len()).filter(|&i| i != keep && !self.active[i].pages.is_empty()).max_by_key(|&i| {
            let a = &self.active[i];
            (a.effective_band(self.cfg.aging), std::cmp::Reverse(a.n_computed), a.seq)
        })
    }

    pub(super) fn preempt(&mut self, i: usize) -> anyhow::Result<()> {
        let pages = self.active[i].pages.clone();
        let mut swapped = false;
        if !pages.is_empty() && self.swapped_bytes < self.cfg.swap_bytes {
            let data = check(self.backend.swap_out(pages.clone().into()))?.into_vec();
            if self.swapped_bytes + data.len() as u64 <= self.cfg.swap_bytes {
                self.swapped_bytes += data.len() as u64;
                self.active[i].swapped = Some(data);
                swapped = true;
            }
        }
        for &p in &pages {
            self.pool.release(p);
        }
        let a = &mut self.active[i];
        a.pages.clear();
        if !swapped {
            a.n_computed = 0;
            a.hashes.clear();
        }
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).preemptions += 1;
        tracing::info!(request = a.req.id, swapped, "preempted");
        Ok(())
    }

    /// Gives a swapped request its pages back.
    pub(super) fn resume(&mut self, i: usize) -> anyhow::Result<bool> {
        let Some(data) = self.active[i].swapped.as_ref() else { return Ok(true) };
        let n = self.active[i].n_computed.div_ceil(self.cfg.page_size);
        if self.pool.available() < n {
            return Ok(false);
        }
        let tenant = self.active[i].req.tenant;
        let pages: Vec<u32> = (0..n).map(|_| self.pool.alloc(tenant).expect("checked available")).collect();
        check(self.backend.swap_in(pages.clone().into(), data.clone().into()))?;
        let a = &mut self.active[i];
        self.swapped_bytes -= a.swapped.take().map_or(0, |d| d.len() as u64);
        a.pages = pages;
        // Swapped pages come back private: their cache entries were dropped with the pages.
        a.hashes.clear();
        Ok(true)
    }
}
