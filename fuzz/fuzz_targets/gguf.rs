//! Hostile model files: any bytes, read as zinc reads a model (the GGUF reader, then the
//! model program, the tokenizer and the chat template), must load or be refused with an
//! error; never panic, never allocate or loop without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;
use zinc::model::{gguf::GgufFile, loaded::Model};

fuzz_target!(|data: &[u8]| {
    // An empty map cannot be made; an empty file is the reader's shortest refusal anyway.
    if data.is_empty() {
        return;
    }
    let Ok(mut anon) = memmap2::MmapMut::map_anon(data.len()) else { return };
    anon.copy_from_slice(data);
    let Ok(map) = anon.make_read_only() else { return };
    if let Ok(file) = GgufFile::parse(Arc::new(map), "fuzz.gguf") {
        if let Ok(model) = Model::from_file(file, "fuzz".into()) {
            // A loaded vocabulary must encode and decode what it is given.
            let ids = model.tokenizer.encode("Hello, fuzz! 123 é", true, true);
            let _ = model.tokenizer.decode(&ids, true);
        }
    }
});
