//! Window pages (`zinc_plugin_api::kv`): the sliding-window layers' keys and values in their
//! own page class, pages that left every window freed. On the CPU tier and on Vulkan
//! (lavapipe in CI), the same steps must give the same logits, to the bit, whether the
//! window layers' keys live in whole pages or in window pages of which the early ones were
//! freed and filled with NaN: the split changes where keys are, never what attention reads,
//! and a freed page is never read, not even under a mask (a NaN value times a zero weight
//! is NaN).

use zinc_plugin_api::{first_window_page, window_keys, KvPoolSpec, LogitRows, SeqChunk, Step, NO_PAGE};
use zinc_tests::{open_backend, synth_model, Scratch};

const PAGE: u32 = 16;

/// One sequence's part of a step: its new tokens after `n_past`, and its tables.
struct Part {
    seq: u64,
    tokens: Vec<u32>,
    n_past: u32,
    pages: Vec<u32>,
    window: Vec<u32>,
}

fn step(parts: &[Part]) -> Step {
    let mut s = Step::default();
    for p in parts {
        let first_row = s.tokens.len() as u32;
        s.tokens.extend(p.tokens.iter().copied());
        s.positions.extend((0..p.tokens.len() as u32).map(|j| p.n_past + j));
        let used = (p.n_past + p.tokens.len() as u32).div_ceil(PAGE) as usize;
        s.seqs.push(SeqChunk {
            seq_id: p.seq,
            first_row,
            n_rows: p.tokens.len() as u32,
            n_past: p.n_past,
            page_table: p.pages[..used].to_vec().into(),
            window_table: p.window.get(..used).unwrap_or_default().to_vec().into(),
            logits: LogitRows::All,
        });
    }
    s
}

/// Logits of every step of a sequence (`main`: prompt chunks of 64, 64 and 32 tokens, then
/// three decodes, far past 16-key windows) beside a second sequence (`other`) on backend
/// `name`. With `split`, the window layers' keys go to window pages: `main`'s table frees
/// every page its windows left before each step, and the freed pages are filled with NaN.
fn run(name: &str, model: &zinc::model::loaded::Model, split: bool) -> Vec<Vec<f32>> {
    let mut b = open_backend(name, "");
    b.load_model(&model.program).into_result().unwrap_or_else(|e| panic!("{name}: {}", e.message));
    let (n_pages, window_pages) = (32, if split { 48 } else { 0 });
    let spec = KvPoolSpec { n_pages, page_size: PAGE, window_pages };
    let info = b.create_kv_pool(spec).into_result().unwrap_or_else(|e| panic!("{name}: {}", e.message));
    assert_eq!(info.window_pages, window_pages);
    let keys = window_keys(&model.program);
    assert!(keys > 0 && keys < 64, "a preset with short sliding windows");
    // Window page ids start at n_pages: other's first twelve, and main's where no full page's
    // index is (a backend that took the full tables for window layers would leave them
    // unwritten).
    let other_window: Vec<u32> = (0..12).map(|i| n_pages + i).collect();
    let main_window: Vec<u32> = (32..44).map(|i| n_pages + i).collect();
    let nan_page = [0x00u8, 0x7e].repeat((info.bytes_per_window_page / 2) as usize);
    let toks = |n: u32, salt: u32| (0..n).map(|i| 300 + (i * 37 + salt * 101) % 5000).collect::<Vec<u32>>();
    // (main's chunk, other's chunk) per step: (tokens, n_past).
    let mut plan = vec![((64, 0), (16, 0)), ((64, 64), (16, 16)), ((32, 128), (64, 32))];
    plan.extend((0..3).map(|i| ((1, 160 + i), (1, 96 + i))));
    let last_position = 162;
    let mut out = Vec::new();
    let mut poisoned = 0;
    for (k, ((mn, mp), (on, op))) in plan.into_iter().enumerate() {
        let freed = first_window_page(keys, mp, PAGE) as usize;
        if split && freed > poisoned {
            let pages = main_window[poisoned..freed].to_vec();
            let data = nan_page.repeat(pages.len());
            b.swap_in(pages.into(), data.into()).into_result().unwrap_or_else(|e| panic!("{name}: {}", e.message));
            poisoned = freed;
        }
        let window = |table: &[u32], freed: usize| match split {
            true => table.iter().enumerate().map(|(i, &p)| if i < freed { NO_PAGE } else { p }).collect(),
            false => Vec::new(),
        };
        let main = Part {
            seq: 0,
            tokens: toks(mn, k as u32),
            n_past: mp,
            pages: (0..12).collect(),
            window: window(&main_window, freed),
        };
        let other = Part {
            seq: 1,
            tokens: toks(on, 50 + k as u32),
            n_past: op,
            pages: (16..28).collect(),
            window: window(&other_window, 0),
        };
        let s = step(&[main, other]);
        out.push(
            b.execute(&s).into_result().unwrap_or_else(|e| panic!("{name} step {k}: {}", e.message)).logits.to_vec(),
        );
    }
    assert!(!split || poisoned >= 8, "the plan frees pages");
    if split {
        // The window layers' keys are in the pages the window table names: main's last page
        // holds its last positions' keys and values.
        let last = main_window[(last_position / PAGE) as usize];
        let bytes = b.swap_out(vec![last].into()).into_result().unwrap_or_else(|e| panic!("{name}: {}", e.message));
        let halves: Vec<u16> = bytes.chunks_exact(2).map(|h| u16::from_le_bytes([h[0], h[1]])).collect();
        assert_eq!(bytes.len() as u64, info.bytes_per_window_page);
        assert!(halves.iter().any(|&h| h & 0x7fff != 0), "{name}: window page {last} was never written");
        assert!(halves.iter().all(|&h| h & 0x7c00 != 0x7c00), "{name}: window page {last} holds a NaN or infinity");
    }
    out
}

fn window_pages_match_whole_pages(preset: &str) {
    let model = synth_model(&Scratch::new(&format!("window-{preset}")), preset, 3);
    for name in ["cpu", "vulkan"] {
        // A window page holds the window layers, a full page the others.
        let pool = |window_pages| {
            let mut b = open_backend(name, "");
            b.load_model(&model.program).into_result().unwrap();
            b.create_kv_pool(KvPoolSpec { n_pages: 4, page_size: PAGE, window_pages }).into_result().unwrap()
        };
        let (whole, split) = (pool(0), pool(4));
        assert_eq!((whole.window_pages, whole.bytes_per_window_page), (0, 0));
        assert!(split.bytes_per_page > 0 && split.bytes_per_window_page > 0);
        assert_eq!(split.bytes_per_page + split.bytes_per_window_page, whole.bytes_per_page, "{name}");
        let (whole, split) = (run(name, &model, false), run(name, &model, true));
        for (k, (a, b)) in whole.iter().zip(&split).enumerate() {
            assert_eq!(a.len(), b.len());
            let differ = a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
            assert_eq!(differ, 0, "{preset} on {name}, step {k}: {differ} of {} logits differ", a.len());
        }
    }
}

/// Gemma 3's shape (`tiny-gemma3`: 16-key windows on three of four layers, the local RoPE
/// base): the window layers' keys through the one-row kernel with its fused prelude (decode),
/// the prompt tiles, and the Q/K/V products' KV-store epilogue.
#[test]
fn gemma3_window_pages_give_the_logits_of_whole_pages() {
    window_pages_match_whole_pages("tiny-gemma3");
}

/// Gemma 2's shape (`tiny-gemma2`: windows on every other layer, soft caps), whose decode takes
/// the separate KV store and the one-row kernel without the prelude.
#[test]
fn gemma2_window_pages_give_the_logits_of_whole_pages() {
    window_pages_match_whole_pages("tiny-gemma2");
}
