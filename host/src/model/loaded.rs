//! A model ready to run: the validated file, its program, its tokenizer and chat template.

use super::{
    arch::{
        build_program,
        rope_scaling::{self, LongFactors},
    },
    gguf::GgufFile,
    tokenizer::Tokenizer,
};
use anyhow::{Context, Result};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use zinc_plugin_api::ModelProgram;

/// The file name of the default model.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Everything loaded from one GGUF file.
pub struct Model {
    /// The mapped file (its bytes back the program's tensors).
    pub file: GgufFile,
    /// The program backends run.
    pub program: ModelProgram,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// `tokenizer.chat_template`, if the file has one.
    pub chat_template: Option<String>,
    /// A short name for messages and the API (the file stem).
    pub name: String,
    /// LongRoPE's factors for long sequences (Phi-3's 128k variants), which
    /// [`Model::program_for_context`] puts in place of the program's short ones.
    pub long_rope: Option<LongFactors>,
}

impl Model {
    /// Opens, validates and prepares a model file.
    pub fn load(path: &Path) -> Result<Model> {
        Self::load_with_progress(path, false)
    }

    /// Like [`Model::load`]; with `progress`, a large file is read into memory up front with a
    /// progress line on stderr, so the first request does not pay for page faults.
    pub fn load_with_progress(path: &Path, progress: bool) -> Result<Model> {
        let file = GgufFile::open(path)?;
        if progress {
            prefault(&file.map(), path);
        }
        let name = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
        Self::from_file(file, name)
    }

    /// Prepares a validated file: its program, its tokenizer (whose vocabulary must match the
    /// embeddings) and its chat template. Everything a loaded file goes through after the
    /// GGUF reader, which the fuzz targets (fuzz/) also drive from bytes in memory.
    pub fn from_file(mut file: GgufFile, name: String) -> Result<Model> {
        super::split_experts::stack_split_experts(&mut file)?;
        let program = build_program(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        if tokenizer.vocab_size() != program.hparams.n_vocab as usize {
            anyhow::bail!(
                "{}: the vocabulary has {} tokens but token_embd has {} rows",
                file.path,
                tokenizer.vocab_size(),
                program.hparams.n_vocab
            );
        }
        let chat_template = file
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .or_else(|| builtin_template(&program.arch).map(str::to_string));
        let hp = &program.hparams;
        let long_rope = rope_scaling::read(&file, &program.arch, hp.rope_dim, hp.rope_base)?.long;
        Ok(Model { file, program, tokenizer, chat_template, name, long_rope })
    }

    /// The program for sequences of up to `ctx` tokens: a LongRoPE file's long factors where
    /// `ctx` exceeds its original context, as llama.cpp chooses them (by the context per
    /// sequence, not by position: every token of such a sequence turns at the long
    /// frequencies); the program as loaded otherwise.
    pub fn program_for_context(&self, ctx: u32) -> Cow<'_, ModelProgram> {
        match &self.long_rope {
            Some(long) if ctx > long.original_ctx => {
                let mut program = self.program.clone();
                program.hparams.rope_freq_factors = long.divisors.clone().into();
                Cow::Owned(program)
            }
            _ => Cow::Borrowed(&self.program),
        }
    }

    /// Context length: the trained length, capped by `limit` when given.
    pub fn context_length(&self, limit: Option<u32>) -> u32 {
        let trained = self.program.hparams.n_ctx_train.max(1);
        limit.map_or(trained, |l| l.min(trained)).max(1)
    }
}

/// Directories searched for models: `$ZINC_MODEL_DIR`, `./models`, the repository's
/// `models/` next to a `target/<profile>/zinc` binary.
pub fn model_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("ZINC_MODEL_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from("models"));
    if let Some(exe) = crate::registry::config::exe_dir() {
        dirs.push(exe.join("../../models"));
    }
    dirs
}

/// The model to use: `explicit` if given, else the default model from the model directories.
pub fn resolve_model(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let dirs = model_dirs();
    dirs.iter().map(|d| d.join(DEFAULT_MODEL_FILE)).find(|p| p.is_file()).with_context(|| {
        let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!(
            "the default model {DEFAULT_MODEL_FILE} is not in {}; fetch it with `bash scripts/fetch-model.sh` or pass -m FILE",
            list.join(", ")
        )
    })
}

/// Files smaller than this load fast enough without a progress line.
const PROGRESS_THRESHOLD: usize = 256 << 20;

/// Touches every page of the map, printing a progress line.
fn prefault(map: &memmap2::Mmap, path: &Path) {
    use std::io::Write;
    if map.len() < PROGRESS_THRESHOLD {
        return;
    }
    let chunk = 64 << 20;
    let mut sum = 0u8;
    for (i, part) in map.chunks(chunk).enumerate() {
        for page in part.chunks(4096) {
            sum = sum.wrapping_add(page[0]);
        }
        let done = ((i + 1) * chunk).min(map.len());
        eprint!(
            "\rzinc: loading {} {:3}% of {:.2} GiB",
            path.display(),
            done * 100 / map.len(),
            map.len() as f64 / (1u64 << 30) as f64
        );
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    std::hint::black_box(sum);
}

/// The default model for unit tests that need a real tokenizer and chat template (its
/// weights are not used), fetched by `scripts/fetch-model.sh` as every test run does first.
#[cfg(test)]
pub fn default_model_for_tests() -> Model {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `bash scripts/fetch-model.sh`", path.display());
    Model::load(&path).expect("the default model loads")
}

/// Gemma's turns, for Gemma files that carry no template (the Gemma 3 270M file does not):
/// the format of Gemma 3's own template, a system message prefixed to the first user turn,
/// `assistant` written `model`. BOS is not written here: the tokenizer adds it.
const GEMMA_TEMPLATE: &str = r#"
{%- set ns = namespace(system='') -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
{%- set ns.system = ns.system + m.content + '\n\n' -%}
{%- else -%}
{{ '<start_of_turn>' + ('model' if m.role == 'assistant' else m.role) + '\n' }}
{%- if m.role == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif -%}
{{ m.content + '<end_of_turn>\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"#;

/// A chat template for an architecture whose files may come without one.
fn builtin_template(arch: &str) -> Option<&'static str> {
    match arch {
        "gemma3" => Some(GEMMA_TEMPLATE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::GEMMA_TEMPLATE;
    use minijinja::{context, Environment};

    /// Gemma's turn format: `<start_of_turn>ROLE\n…<end_of_turn>\n`, the system text at the
    /// head of the first user turn, the assistant as `model`, an open model turn to generate.
    #[test]
    fn the_gemma_template_writes_gemma_turns() {
        let env = Environment::new();
        let msgs = [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")];
        let msgs: Vec<_> = msgs.iter().map(|(r, c)| context! { role => r, content => c }).collect();
        let text =
            env.render_str(GEMMA_TEMPLATE, context! { messages => msgs, add_generation_prompt => true }).unwrap();
        assert_eq!(
            text,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
