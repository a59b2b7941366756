//! Fair share between tenants: virtual token counters (VTC, Sheng et al., OSDI 2024), one set
//! per priority band, with aging across bands.
//!
//! A tenant's counter grows by `PROMPT_WEIGHT × executed prompt tokens / weight` and
//! `OUTPUT_WEIGHT × generated tokens / weight`; prompt tokens served from the prefix cache are
//! not charged. The waiting request of the tenant with the smallest counter in the most urgent
//! band goes next. A tenant whose queue goes from empty to non-empty is lifted to the smallest
//! counter among tenants still waiting in that band, so idleness earns no credit.

use super::request::Band;
use std::collections::HashMap;

/// Charge per executed prompt token (the paper's w_p).
pub const PROMPT_WEIGHT: f64 = 1.0;
/// Charge per generated token (the paper's w_q).
pub const OUTPUT_WEIGHT: f64 = 2.0;

/// Counters per (band, tenant) and tenant weights.
#[derive(Debug, Default)]
pub struct Vtc {
    counters: HashMap<(Band, u32), f64>,
    weights: HashMap<u32, f64>,
}

impl Vtc {
    /// Sets a tenant's weight (default 1).
    pub fn set_weight(&mut self, tenant: u32, weight: f64) {
        self.weights.insert(tenant, weight.max(1e-6));
    }

    fn weight(&self, tenant: u32) -> f64 {
        self.weights.get(&tenant).copied().unwrap_or(1.0)
    }

    /// A tenant's counter in a band.
    pub fn counter(&self, band: Band, tenant: u32) -> f64 {
        self.counters.get(&(band, tenant)).copied().unwrap_or(0.0)
    }

    /// Charges executed prompt tokens.
    pub fn charge_prompt(&mut self, band: Band, tenant: u32, tokens: u32) {
        let w = self.weight(tenant);
        *self.counters.entry((band, tenant)).or_default() += PROMPT_WEIGHT * tokens as f64 / w;
    }

    /// Charges generated tokens.
    pub fn charge_output(&mut self, band: Band, tenant: u32, tokens: u32) {
        let w = self.weight(tenant);
        *self.counters.entry((band, tenant)).or_default() += OUTPUT_WEIGHT * tokens as f64 / w;
    }

    /// Charges other work in units of generated tokens (a grammar's mask time, as a share
    /// of a decode step).
    pub fn charge_output_equivalent(&mut self, band: Band, tenant: u32, tokens: f64) {
        let w = self.weight(tenant);
        *self.counters.entry((band, tenant)).or_default() += OUTPUT_WEIGHT * tokens / w;
    }

    /// Called when `tenant` gets work in `band` after having none: lifts its counter to the
    /// smallest counter of the tenants in `others` (those with work waiting in the band).
    pub fn on_backlogged(&mut self, band: Band, tenant: u32, others: impl Iterator<Item = u32>) {
        let floor = others.filter(|&t| t != tenant).map(|t| self.counter(band, t)).fold(f64::INFINITY, f64::min);
        if floor.is_finite() {
            let c = self.counters.entry((band, tenant)).or_default();
            *c = c.max(floor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_divide_charges_and_idleness_earns_no_credit() {
        let mut v = Vtc::default();
        v.set_weight(2, 2.0);
        v.charge_prompt(Band::Batch, 1, 100);
        v.charge_prompt(Band::Batch, 2, 100);
        assert_eq!(v.counter(Band::Batch, 1), 100.0);
        assert_eq!(v.counter(Band::Batch, 2), 50.0);
        v.charge_output(Band::Batch, 1, 10);
        assert_eq!(v.counter(Band::Batch, 1), 120.0);
        // Tenant 3 arrives after being idle: lifted to the smallest waiting counter (50).
        v.on_backlogged(Band::Batch, 3, [1, 2].into_iter());
        assert_eq!(v.counter(Band::Batch, 3), 50.0);
        // Bands are separate.
        assert_eq!(v.counter(Band::Interactive, 1), 0.0);
    }
}
