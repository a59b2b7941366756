//! Random hostile input, seeded, in the cargo suite: it finds what random damage finds, where
//! the coverage-guided targets in fuzz/ (scripts/fuzz.sh) find what coverage leads to. The
//! seed of a failure is in its message; `ZINC_MUTATIONS=N` runs N cases of each test instead
//! of the default.
//!
//! * Model files mutated at random, loaded as zinc loads a model (GGUF reader, model program,
//!   tokenizer): every one loads or is refused with an error, never panics, and finishes
//!   quickly.
//! * Random text through the default model's tokenizer: encoding and decoding give the text
//!   back byte for byte, within a time bound.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use zinc::model::loaded::Model;
use zinc_tests::{repo_root, synth_preset, Scratch};

/// Cases in a default run: each load of the tiny file takes a few tens of milliseconds.
const DEFAULT_CASES: u64 = 150;

/// Cases of a test: `ZINC_MUTATIONS`, or the default.
fn cases() -> u64 {
    std::env::var("ZINC_MUTATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES)
}

/// The longest a single load may take, however damaged the file (a length field that asks for
/// a huge allocation or loop must be refused, not attempted).
const LOAD_LIMIT: Duration = Duration::from_secs(5);

/// A small deterministic generator (xorshift64*), so that a failure's seed reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One random damage to `bytes`, most of it inside the header (metadata and tensor table,
/// where the reader's decisions are), described for the failure message.
fn mutate(bytes: &mut Vec<u8>, header: usize, rng: &mut Rng) -> String {
    // An earlier damage of the same case may have cut the file short.
    let header = header.min(bytes.len());
    if header < 16 {
        return "nothing (the file is already cut to its first bytes)".into();
    }
    let at = rng.below(header);
    match rng.below(5) {
        0 => {
            let bit = 1u8 << rng.below(8);
            bytes[at] ^= bit;
            format!("bit {bit:#x} flipped at {at}")
        }
        1 => {
            let v = rng.next() as u8;
            bytes[at] = v;
            format!("byte at {at} set to {v}")
        }
        2 => {
            // A length, count or offset field overwritten with an extreme or random value.
            let v = [u64::MAX, u64::MAX / 2, 1 << 32, 0, rng.next()][rng.below(5)];
            let at = at.min(bytes.len() - 8);
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
            format!("u64 at {at} set to {v:#x}")
        }
        3 => {
            let len = rng.below(bytes.len());
            bytes.truncate(len);
            format!("truncated to {len} bytes")
        }
        _ => {
            // A run of the header copied over another part of it (strings over counts, ...).
            let (from, len) = (rng.below(header), 1 + rng.below(64));
            let len = len.min(header - from).min(bytes.len() - at);
            let run = bytes[from..from + len].to_vec();
            bytes[at..at + len].copy_from_slice(&run);
            format!("{len} bytes from {from} copied to {at}")
        }
    }
}

#[test]
fn randomly_damaged_model_files_load_or_are_refused_without_panicking() {
    let dir = Scratch::new("mutated");
    let model = synth_preset(&dir, "tiny-llama");
    let original = std::fs::read(&model).unwrap();
    // Where the tensor data starts: the header is everything before the first tensor's bytes.
    let file = zinc::model::gguf::GgufFile::open(&model).unwrap();
    let header = file.tensors.iter().map(|t| t.file_offset).min().unwrap();
    assert!(header > 0 && header < original.len());
    let cases = cases();
    let case_path = dir.join("case.gguf");
    let (mut loaded, mut refused) = (0, 0);
    for seed in 1..=cases {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut bytes = original.clone();
        let what: Vec<String> = (0..1 + rng.below(3)).map(|_| mutate(&mut bytes, header, &mut rng)).collect();
        std::fs::write(&case_path, &bytes).unwrap();
        let t = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| Model::load(&case_path)));
        let took = t.elapsed();
        let what = what.join(", ");
        match result {
            Err(_) => panic!("seed {seed} ({what}): loading panicked"),
            Ok(Ok(_)) => loaded += 1,
            Ok(Err(e)) => {
                assert!(!e.to_string().is_empty(), "seed {seed} ({what}): an empty error");
                refused += 1;
            }
        }
        assert!(took < LOAD_LIMIT, "seed {seed} ({what}): loading took {took:?}");
    }
    eprintln!("{cases} damaged files: {loaded} loaded, {refused} refused with an error");
    // Most damage to the header must be noticed; a reader that accepted everything would be
    // checking nothing.
    assert!(refused * 2 > cases as usize, "only {refused} of {cases} damaged files refused");
}

/// Pieces random text is made of: letters, digits, spaces and newlines, punctuation, accented
/// and CJK letters, emoji, and fragments of the chat template's control tokens.
const PIECES: &[&str] = &[
    "a",
    "Z",
    "7",
    " ",
    "  ",
    "\n",
    "\t",
    "'s",
    ",",
    ".",
    "!",
    "<",
    "|",
    ">",
    "é",
    "ñ",
    "東",
    "京",
    "ü",
    "🦀",
    "👍🏽",
    "\u{200b}",
    "\u{feff}",
    "<|im_start|>",
    "<|im_end|>",
    "<|im_",
    "start|>",
    "<|endoftext|>",
    "\r\n",
    "aaaaaaaaaaaaaaaaaaaa",
    "1234567890",
    "http://x.y/z?q=1",
];

#[test]
fn random_text_survives_the_tokenizer_round_trip() {
    let path = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.is_file(), "{} is missing: run scripts/fetch-model.sh", path.display());
    let model = Model::load(&path).unwrap();
    let mut rng = Rng(0x5eed);
    for case in 0..cases() {
        let n = 1 + rng.below(400);
        let text: String = (0..n).map(|_| PIECES[rng.below(PIECES.len())]).collect();
        let t = Instant::now();
        // Control-token text is plain text here (as message content is).
        let ids = model.tokenizer.encode(&text, false, false);
        let back = model.tokenizer.decode(&ids, true);
        assert!(t.elapsed() < LOAD_LIMIT, "case {case}: {} bytes took {:?}", text.len(), t.elapsed());
        assert_eq!(back, text, "case {case}: the round trip changed the text ({} ids)", ids.len());
    }
}
