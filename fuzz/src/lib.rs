//! What the fuzz targets share: the real models whose tokenizers and chat templates they
//! drive (loaded once per process), and a way to cut one input into several.

use std::path::PathBuf;
use std::sync::OnceLock;
use zinc::model::loaded::Model;

/// The repository's `models/` folder, where `scripts/fetch-model.sh` puts the test models.
fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models")
}

fn load(file: &str) -> Model {
    let path = models_dir().join(file);
    Model::load(&path).unwrap_or_else(|e| panic!("{e:#}: fetch it with `bash scripts/fetch-model.sh` first"))
}

/// The default model (SmolLM2-135M-Instruct: byte-level BPE, ChatML template).
pub fn smollm2() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| load(zinc::model::loaded::DEFAULT_MODEL_FILE))
}

/// Gemma 3 270M (SentencePiece with byte fallback, user-defined whitespace tokens, Gemma's
/// template), fetched by `bash scripts/fetch-model.sh gemma3`.
pub fn gemma3() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| load("gemma-3-270m-q4_k_m.gguf"))
}

/// The models a target picks from with an input's first byte.
pub fn model(selector: u8) -> &'static Model {
    if selector % 2 == 0 {
        smollm2()
    } else {
        gemma3()
    }
}

/// The longest prompt text the server tokenizes for `model` at its trained context (longer text
/// is refused before tokenization: `AppState::prompt_text_limit`).
pub fn prompt_text_limit(model: &Model) -> usize {
    static LIMITS: OnceLock<[usize; 2]> = OnceLock::new();
    let limits = LIMITS
        .get_or_init(|| [smollm2(), gemma3()].map(|m| m.context_length(None) as usize * m.tokenizer.max_token_bytes()));
    if std::ptr::eq(model, smollm2()) {
        limits[0]
    } else {
        limits[1]
    }
}

/// Splits `data` at the byte 0xFF into at most `n` parts (the last keeps the rest), so that
/// one input can carry a template and messages, or stop strings and a generation. 0xFF never
/// occurs in UTF-8, so text parts stay whole.
pub fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |&b| b == 0xFF).collect()
}
