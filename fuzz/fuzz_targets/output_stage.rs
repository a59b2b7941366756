//! The output stage every generated token goes through (stop strings, held-back text, UTF-8
//! pieces, length limits), on a vocabulary of single bytes: the input gives stop strings and
//! the bytes "generated". What streams with the stop strings must be the text streamed without
//! them, cut before the first stop string in it after the first token that completes one (the
//! generation ends there, so a stop string that would have started earlier but completes later
//! never appears), and no streamed piece may hold a stop string.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zinc::engine::output::{OutputLimits, OutputStage, RowLogits, TokenText};
use zinc::engine::sampler::SamplerConfig;

/// Token `i` is byte `i`; none is a stop token (the length and stop strings end the text).
struct Bytes;
impl TokenText for Bytes {
    fn is_stop(&self, _: u32) -> bool {
        false
    }
    fn bytes(&self, id: u32) -> Vec<u8> {
        vec![id as u8]
    }
}

/// Streams `generated` one byte per step through a greedy stage that may generate
/// `max_tokens`; returns each step's piece.
fn stream(stop: &[String], generated: &[u8], max_tokens: u32) -> Vec<String> {
    let sampler = SamplerConfig { temperature: 0.0, ..Default::default() };
    let limits = OutputLimits { stop: stop.to_vec(), max_tokens, max_context: u32::MAX, ..Default::default() };
    let mut stage = OutputStage::new(sampler, limits);
    let (mut history, mut pieces) = (vec![1u32], Vec::new());
    for &b in generated {
        let mut logits = vec![0f32; 256];
        logits[b as usize] = 1.0;
        let e = stage.step(&Bytes, RowLogits::Whole(&logits), &mut history);
        pieces.push(e.text.unwrap_or_default());
        if e.finish.is_some() {
            break;
        }
    }
    pieces
}

fuzz_target!(|data: &[u8]| {
    let parts = zinc_fuzz::parts(data, 4);
    let Some((generated, stops)) = parts.split_last() else { return };
    if generated.is_empty() {
        return;
    }
    let stop: Vec<String> =
        stops.iter().map(|s| String::from_utf8_lossy(s).into_owned()).filter(|s| !s.is_empty()).collect();
    // Without stop strings nothing is held back: after each token, the text so far. At its
    // length limit the generation ends and the bytes the decoder still holds are flushed (as
    // U+FFFD where they end mid-character): that flush is a step of its own, after the last
    // token's (a stop string the last token completes ends the text before it).
    let n = generated.len() as u32;
    let tokens = stream(&[], generated, u32::MAX);
    let whole = stream(&[], generated, n).concat();
    let flushed = whole[tokens.concat().len()..].to_string();
    let mut text = String::new();
    let mut expected = None;
    for piece in tokens.iter().chain(std::iter::once(&flushed)) {
        text.push_str(piece);
        if let Some(cut) = stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            expected = Some(text[..cut].to_string());
            break;
        }
    }
    let expected = expected.unwrap_or(text);
    let pieces = stream(&stop, generated, n);
    for p in &pieces {
        assert!(!stop.iter().any(|s| p.contains(s.as_str())), "a streamed piece holds a stop string: {p:?}");
    }
    assert_eq!(pieces.concat(), expected, "stop strings {stop:?}");
});
