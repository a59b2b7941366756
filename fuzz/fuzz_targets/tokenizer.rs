//! Any text through the real models' tokenizers (the first byte picks SmolLM2's byte-level
//! BPE or Gemma 3's SentencePiece): encoding then decoding gives the text back byte for byte,
//! with control tokens read as text or parsed; a text protected whole encodes as plain text.
//! Characters the vocabulary cannot spell are left out first: SmolLM2's has no token for 21
//! bytes (some control bytes such as U+0004, and the lead bytes of planes 4 to 11), which zinc
//! drops as llama.cpp does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let tok = &zinc_fuzz::model(selector).tokenizer;
    let text: String = String::from_utf8_lossy(rest)
        .chars()
        .filter(|c| {
            let c = c.encode_utf8(&mut [0; 4]).to_string();
            tok.decode(&tok.encode(&c, false, false), true) == c
        })
        .collect();
    let plain = tok.encode(&text, false, false);
    assert_eq!(tok.decode(&plain, true), text, "plain encoding must decode to the text");
    let parsed = tok.encode(&text, false, true);
    assert_eq!(tok.decode(&parsed, true), text, "control tokens parsed must decode to the text");
    if tok.control_token_in(&text).is_none() {
        assert_eq!(parsed, plain, "text without control tokens encodes alike either way");
    }
    assert_eq!(tok.encode_protected(&text, false, &[0..text.len()]), plain, "a protected text is plain text");
});
