//! The KV manager's page bookkeeping against a stand-in backend that records page moves.

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
    assert!(!kv.swap_in(&mut a, 1, &mut mover).unwrap(), "two pages free, three needed");
    assert!(a.is_swapped());
    let mut hold = hold;
    kv.release(&mut hold[0]);
    assert!(kv.swap_in(&mut a, 1, &mut mover).unwrap());
    assert!(kv.swap_in(&mut b, 2, &mut mover).unwrap());
    assert_eq!((a.pages().len(), kv.swapped_bytes()), (3, 0));
    for s in [&mut a, &mut b, &mut hold[1]] {
        kv.release(s);
    }
    assert_eq!(kv.pool().in_use(), 0);
}

/// A manager of 64 full pages and `window` window pages (ids from 64) for 16-key windows.
fn windowed(window: u32) -> KvManager {
    KvManager::with_window(64, 16, 1 << 20, WindowSpec { pages: window, first_id: 64, keys: 16 })
}

fn window_in_use(kv: &KvManager) -> u32 {
    kv.window_pool().map_or(0, |w| w.in_use())
}

#[test]
fn window_pages_leave_with_the_window_and_published_ones_stay_cached() {
    let mut kv = windowed(16);
    let tokens: Vec<u32> = (0..40).collect();
    let mut seq = computed(&mut kv, prompt(&tokens, 1, 0), 40);
    assert_eq!((seq.pages().len(), seq.window_held()), (3, 3));
    // Decoding on to 200 positions: the next query at 200 reads keys from 185, kernels
    // from 128 (a whole tile), so pages 0..8 left every window.
    let need = kv.pages_needed(&seq, 200);
    assert!(kv.grow(&mut seq, 1, need));
    kv.slide(&mut seq, 200);
    assert_eq!((seq.pages().len(), seq.window_held(), window_in_use(&kv)), (13, 5, 5));
    assert!(seq.window()[..8].iter().all(|&p| p == NO_PAGE) && seq.window()[8..].iter().all(|&p| p >= 64));
    // The two published prompt pages' window pages are cached, the rest free.
    assert_eq!(kv.window_pool().unwrap().cached(), 2);
    assert_eq!(kv.available(), 11, "the scarcer class counts");
    kv.release(&mut seq);
    assert_eq!((kv.pool().in_use(), window_in_use(&kv)), (0, 0));
}

#[test]
fn growth_stops_when_window_pages_run_out_and_keeps_the_classes_paired() {
    let mut kv = windowed(2);
    let mut seq = SeqKv::default();
    assert!(!kv.grow(&mut seq, 1, 3));
    assert_eq!((seq.pages().len(), seq.window().len()), (2, 2));
    assert_eq!((kv.pool().in_use(), window_in_use(&kv)), (2, 2), "the third full page went back");
    kv.release(&mut seq);
}

#[test]
fn a_prefix_match_takes_the_window_pages_its_first_query_reads() {
    let mut kv = windowed(16);
    let mut mover = Mover::default();
    let tokens: Vec<u32> = (0..200).collect();
    let mut first = computed(&mut kv, prompt(&tokens, 1, 0), 200);
    kv.slide(&mut first, 200);
    kv.release(&mut first);
    // Another request takes the four free window pages and evicts the eight earliest
    // cached ones (released first), which the next match does not need: its first query,
    // at 192, reads from page 8.
    let mut other = SeqKv::default();
    assert!(kv.grow(&mut other, 2, 12));
    let longer: Vec<u32> = (0..300).collect();
    let mut again = SeqKv::default();
    assert_eq!(kv.match_prefix(&mut again, prompt(&longer, 1, 0), &mut mover), Matched { tokens: 192 });
    assert_eq!(again.window_held(), 4);
    assert!(again.window()[..8].iter().all(|&p| p == NO_PAGE));
    kv.release(&mut again);
    // Now page 8's window page goes too: the match gives back what it cannot use, down to
    // the pages whose windows are whole (none here), and keeps no page.
    assert!(kv.grow(&mut other, 2, 1));
    let mut third = SeqKv::default();
    assert_eq!(kv.match_prefix(&mut third, prompt(&longer, 1, 0), &mut mover), Matched { tokens: 0 });
    assert!(third.pages().is_empty() && third.window().is_empty());
    kv.release(&mut other);
    assert_eq!((kv.pool().in_use(), window_in_use(&kv)), (0, 0));
}

#[test]
fn a_swapped_request_gets_back_the_window_pages_it_held() {
    let mut kv = windowed(16);
    let mut mover = Mover::default();
    let tokens: Vec<u32> = (0..200).collect();
    let mut seq = computed(&mut kv, prompt(&tokens, 1, 0), 200);
    kv.slide(&mut seq, 200);
    assert!(kv.swap_out(&mut seq, &mut mover).unwrap());
    // 13 full pages and 5 window pages at 8 bytes each (the stand-in's page size).
    assert_eq!(kv.swapped_bytes(), 18 * 8);
    assert_eq!((kv.pool().in_use(), window_in_use(&kv)), (0, 0));
    assert!(kv.swap_in(&mut seq, 1, &mut mover).unwrap());
    assert_eq!((seq.pages().len(), seq.window().len(), seq.window_held()), (13, 13, 5));
    assert!(seq.window()[..8].iter().all(|&p| p == NO_PAGE));
    kv.release(&mut seq);
    assert_eq!((kv.pool().in_use(), window_in_use(&kv), kv.swapped_bytes()), (0, 0, 0));
}
