//! Where each layer's keys and values live in the KV page pool, and which pages a step may
//! read: the contract between the host's page allocator and every backend's attention.
//!
//! A pool has one or two page classes. The first (ids `0 .. n_pages`) holds the layers that
//! attend over the whole context. With [`KvPoolSpec::window_pages`](crate::KvPoolSpec) set,
//! a second class (ids `n_pages .. n_pages + window_pages`) holds the sliding-window layers
//! (Gemma 2 and 3's local layers), each page only their keys and values. A sequence then has
//! a second page table ([`SeqChunk::window_table`](crate::SeqChunk)), and the host frees the
//! window pages that every window has left ([`first_window_page`]): a long conversation
//! holds its full-attention layers' pages and a window's worth of the others', not every
//! layer's pages for every position.

use crate::program::{AttentionSpan, ModelProgram, Op};

/// A window-table entry whose page no query of this or a later step reads (the host freed
/// it). Backends never dereference it: [`first_window_page`] bounds what they read.
pub const NO_PAGE: u32 = u32::MAX;

/// Backends may read a sliding window's keys from its first key rounded down to a multiple of
/// this (whole key tiles, masked), never earlier; the host keeps those pages.
pub const WINDOW_READ_ALIGN: u32 = 64;

/// The page class that holds a layer's keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvClass {
    /// Pages `0 .. n_pages`, addressed through [`SeqChunk::page_table`](crate::SeqChunk).
    Full,
    /// Pages `n_pages ..`, addressed through [`SeqChunk::window_table`](crate::SeqChunk).
    Window,
}

/// Each attention layer's page class and its slot among that class's layers (a page holds
/// K and V rows for every layer of its class, slot-major), for a program and a pool with or
/// without window pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    /// Per layer index: its class and slot.
    places: Vec<(KvClass, u32)>,
    /// Layers whose keys live in full pages.
    pub full_layers: u32,
    /// Layers whose keys live in window pages (0 without window pages).
    pub window_layers: u32,
}

impl KvLayout {
    /// The layout of `program`'s layers: with `split`, sliding-window layers in the window
    /// class; without, every layer in the full class at its own index.
    pub fn of(program: &ModelProgram, split: bool) -> KvLayout {
        let n = program.hparams.n_layer as usize;
        let mut windowed = vec![false; n];
        for op in program.ops.iter() {
            if let Op::Attention { layer, span: AttentionSpan::Window { .. }, .. } = op {
                if let Some(w) = windowed.get_mut(*layer as usize) {
                    *w = split;
                }
            }
        }
        let (mut full, mut window) = (0u32, 0u32);
        let places = windowed
            .iter()
            .map(|&w| {
                let (class, counter) = if w { (KvClass::Window, &mut window) } else { (KvClass::Full, &mut full) };
                *counter += 1;
                (class, *counter - 1)
            })
            .collect();
        KvLayout { places, full_layers: full, window_layers: window }
    }

    /// `n_layer` layers, all in the full class at their own index (a pool without window
    /// pages of a model given by its layer count).
    pub fn uniform(n_layer: u32) -> KvLayout {
        KvLayout { places: (0..n_layer).map(|l| (KvClass::Full, l)).collect(), full_layers: n_layer, window_layers: 0 }
    }

    /// Layer `layer`'s class and slot (layers past the program's: the full class, slot 0).
    pub fn place(&self, layer: usize) -> (KvClass, u32) {
        self.places.get(layer).copied().unwrap_or((KvClass::Full, 0))
    }
}

/// The widest sliding window of `program`'s attention layers, 0 if none has one: how far back
/// the window pages of a sequence must reach.
pub fn window_keys(program: &ModelProgram) -> u32 {
    program
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Attention { span: AttentionSpan::Window { keys }, .. } => Some(*keys),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The first window-table page a step whose earliest query is at position `n_past` may read,
/// for windows of up to `window_keys` keys and pages of `page_size` tokens: pages before it
/// left every window of the sequence for good (positions only grow) and may be freed.
pub fn first_window_page(window_keys: u32, n_past: u32, page_size: u32) -> u32 {
    let first_key = AttentionSpan::Window { keys: window_keys }.first_key(n_past);
    first_key / WINDOW_READ_ALIGN * WINDOW_READ_ALIGN / page_size.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::RVec;

    /// Four layers: 0 and 2 with sliding windows of 8 and 16 keys, 1 and 3 over everything.
    fn alternating() -> ModelProgram {
        let hparams = crate::program::test_hparams(4);
        let span =
            |l: u32| if l % 2 == 0 { AttentionSpan::Window { keys: 8 * (l + 2) / 2 } } else { AttentionSpan::Full };
        let ops = (0..4).map(|l| Op::Attention { layer: l, q: 0, k: 1, v: 2, out: 3, span: span(l) }).collect();
        ModelProgram { arch: "test".into(), hparams, tensors: RVec::new(), activation_widths: RVec::new(), ops }
    }

    #[test]
    fn window_layers_get_their_own_slots_only_when_split() {
        let p = alternating();
        let split = KvLayout::of(&p, true);
        assert_eq!((split.full_layers, split.window_layers), (2, 2));
        let places: Vec<_> = (0..4).map(|l| split.place(l)).collect();
        assert_eq!(places, [(KvClass::Window, 0), (KvClass::Full, 0), (KvClass::Window, 1), (KvClass::Full, 1)]);
        let whole = KvLayout::of(&p, false);
        assert_eq!((whole.full_layers, whole.window_layers), (4, 0));
        assert_eq!(whole.place(2), (KvClass::Full, 2));
        assert_eq!(window_keys(&p), 16);
    }

    #[test]
    fn window_pages_before_the_aligned_first_key_are_never_read() {
        // A query at 600 with a 512-key window reads from 89; backends may start at 64.
        assert_eq!(first_window_page(512, 600, 16), 4);
        // Until the window has moved a whole tile past the start, nothing is freed.
        assert_eq!(first_window_page(512, 574, 16), 0);
        assert_eq!(first_window_page(512, 575, 16), 4);
        assert_eq!(first_window_page(512, 0, 16), 0);
    }
}
