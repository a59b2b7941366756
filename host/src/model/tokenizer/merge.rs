//! Pairwise merging of adjacent symbols, best pair first, in O(n log n): both BPE flavours
//! (byte-level merges by rank, SentencePiece pieces by score) are this loop with their own
//! pair rule. Rescanning every pair after each merge, as the textbook loop does, is quadratic,
//! and a hostile client sends one 100 KB word.

use std::{cmp::Reverse, collections::BinaryHeap};

/// No neighbour.
const NONE: usize = usize::MAX;

/// Merges adjacent symbols until no pair merges. `pair(left, right)` gives a pair's priority
/// (smaller merges first; equal priorities merge leftmost first) and the merged symbol, or
/// `None` when the pair does not merge. The result is what merging the best pair of the
/// current sequence, one at a time, gives.
pub fn merge<S, P: Ord>(mut syms: Vec<S>, pair: impl Fn(&S, &S) -> Option<(P, S)>) -> Vec<S> {
    let n = syms.len();
    let mut next: Vec<usize> = (1..=n).map(|j| if j < n { j } else { NONE }).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| if i > 0 { i - 1 } else { NONE }).collect();
    // Each symbol's version changes when it merges, so stale candidates are recognised.
    let mut version = vec![0u32; n];
    let mut alive = vec![true; n];
    let mut heap = BinaryHeap::new();
    let candidate = |syms: &[S], version: &[u32], i: usize, j: usize| {
        pair(&syms[i], &syms[j]).map(|(p, _)| Reverse((p, i, j, version[i], version[j])))
    };
    for i in 1..n {
        heap.extend(candidate(&syms, &version, i - 1, i));
    }
    while let Some(Reverse((_, i, j, vi, vj))) = heap.pop() {
        if !alive[i] || !alive[j] || next[i] != j || version[i] != vi || version[j] != vj {
            continue;
        }
        let Some((_, merged)) = pair(&syms[i], &syms[j]) else { continue };
        syms[i] = merged;
        version[i] += 1;
        alive[j] = false;
        next[i] = next[j];
        if next[j] != NONE {
            prev[next[j]] = i;
        }
        if prev[i] != NONE {
            heap.extend(candidate(&syms, &version, prev[i], i));
        }
        if next[i] != NONE {
            heap.extend(candidate(&syms, &version, i, next[i]));
        }
    }
    syms.into_iter().zip(alive).filter_map(|(s, a)| a.then_some(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::merge;

    /// The textbook loop: merge the best pair (leftmost among equals), rescan, repeat.
    fn reference<S: Clone, P: Ord>(mut syms: Vec<S>, pair: impl Fn(&S, &S) -> Option<(P, S)>) -> Vec<S> {
        loop {
            let best = (0..syms.len().saturating_sub(1))
                .filter_map(|i| pair(&syms[i], &syms[i + 1]).map(|(p, s)| (p, i, s)))
                .min_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            let Some((_, i, s)) = best else { return syms };
            syms[i] = s;
            syms.remove(i + 1);
        }
    }

    #[test]
    fn merging_equals_the_textbook_loop_on_random_text() {
        // Symbols are strings over "ab c"; a pair merges when the joined string is in the
        // vocabulary, with the vocabulary's priorities (many ties, overlapping pairs).
        let vocab: Vec<(&str, u32)> =
            vec![("aa", 3), ("ab", 1), ("ba", 1), ("bb", 2), ("aab", 0), ("aaa", 2), ("abab", 1), (" a", 1), ("c ", 4)];
        let pair = |l: &String, r: &String| {
            let joined = format!("{l}{r}");
            vocab.iter().find(|(v, _)| *v == joined).map(|&(_, p)| (p, joined))
        };
        let mut seed = 0x9e3779b97f4a7c15u64;
        for len in 0..200 {
            let text: Vec<String> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    ["a", "b", " ", "c"][(seed % 4) as usize].to_string()
                })
                .collect();
            assert_eq!(merge(text.clone(), pair), reference(text.clone(), pair), "{text:?}");
        }
    }

    #[test]
    fn one_long_run_merges_left_to_right() {
        let pair = |l: &String, r: &String| (l.len() == r.len()).then(|| (0u8, format!("{l}{r}")));
        let out = merge(vec!["x".to_string(); 5], pair);
        assert_eq!(out, vec!["xxxx".to_string(), "x".to_string()]);
    }
}
