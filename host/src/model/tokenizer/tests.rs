//! Tokenizer behaviour on small hand-made vocabularies; real-model token ids are checked
//! against llama.cpp in tests/tests/smollm2.rs.

use super::{bpe::byte_chars, pretok::PreTokenizer, spm::Spm, StreamDecoder};

#[test]
fn gpt2_byte_table_is_a_bijection() {
    let t = byte_chars();
    let mut seen = std::collections::HashSet::new();
    assert!(t.iter().all(|c| seen.insert(*c)));
    assert_eq!(t[b'a' as usize], 'a');
    assert_eq!(t[b' ' as usize], 'Ġ');
    assert_eq!(t[b'\n' as usize], 'Ċ');
}

#[test]
fn smollm_pre_tokenizer_isolates_digits_and_keeps_leading_spaces() {
    let p = PreTokenizer::for_name("smollm").unwrap();
    assert_eq!(p.split("Hello world 123!"), vec!["Hello", " world", " ", "1", "2", "3", "!"]);
    assert_eq!(p.split("it's  fine\n"), vec!["it", "'s", " ", " fine", "\n"]);
    assert!(PreTokenizer::for_name("no-such-pre").is_err());
}

#[test]
fn spm_merges_by_score_and_falls_back_to_bytes() {
    let tokens: Vec<String> =
        ["<unk>", "▁", "a", "b", "▁a", "ab", "▁ab", "<0xC3>", "<0xA9>"].iter().map(|s| s.to_string()).collect();
    let scores = vec![0.0, -1.0, -1.0, -1.0, -2.0, -0.5, -0.1, 0.0, 0.0];
    let types = vec![2, 1, 1, 1, 1, 1, 1, 6, 6];
    let spm = Spm::new(&tokens, scores, &types, true);
    let mut out = Vec::new();
    spm.encode("ab", true, &mut out);
    assert_eq!(out, vec![6], "▁ab wins over ▁a + b");
    out.clear();
    spm.encode("é", false, &mut out);
    assert_eq!(out, vec![7, 8], "é is spelled as its two UTF-8 bytes");
    assert_eq!(spm.decode("<0xC3>"), vec![0xc3]);
    assert_eq!(spm.decode("▁ab"), b" ab".to_vec());
}

#[test]
fn stream_decoder_holds_back_partial_characters() {
    let mut d = StreamDecoder::new();
    let e = "é".as_bytes();
    assert_eq!(d.push(b"caf"), "caf");
    assert_eq!(d.push(&e[..1]), "");
    assert_eq!(d.push(&e[1..]), "é");
    assert_eq!(d.push(&[0xff, b'x']), "\u{fffd}x");
    assert_eq!(d.push(&[0xe2, 0x82]), "");
    assert_eq!(d.finish(), "\u{fffd}");
}
