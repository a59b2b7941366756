//! The record kept beside the committed SPIR-V (`spirv/manifest.tsv`): for every module, the
//! hash of the GLSL it was compiled from (its source file, every file it includes, its
//! defines) and of the SPIR-V itself, and once the hash of the generator (shader-gen's
//! variant list and its locked shaderc version). `tools/shader-gen` writes it with the SPIR-V;
//! the test below checks it against the tree without a shader compiler, so CI needs no
//! glslang build: a shader edited without regenerating the SPIR-V, a module edited by hand or
//! a changed variant list fails it. `tools/shader-gen` includes this file by path.
//!
//! The hash is 64-bit FNV-1a: it guards against forgetting to regenerate, not against anyone
//! forging a collision.

use std::collections::HashSet;

/// The manifest's file name in `backends/vulkan/spirv/`.
pub const FILE: &str = "manifest.tsv";

/// The files that decide which variants exist and how they are compiled, relative to the
/// repository root.
pub const GENERATOR_FILES: [&str; 3] =
    ["tools/shader-gen/src/main.rs", "backends/vulkan/src/catalogue.rs", "tools/shader-gen/Cargo.lock"];

/// 64-bit FNV-1a of `bytes`, continuing from `h`.
pub fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a's starting value.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// One module's line of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Module name (`matmul_q8.q4_0.idot`).
    pub name: String,
    /// Its source file in `shaders/`.
    pub source: String,
    /// Its defines, in the order the generator passes them.
    pub defines: Vec<(String, String)>,
    /// [`sources_hash`] of the GLSL it was compiled from.
    pub sources: u64,
    /// FNV-1a of its SPIR-V.
    pub spirv: u64,
}

/// The hash of a module's GLSL: its source name and defines, then the text of the source and
/// of every file it includes (recursively, each once, in the order first included). `read`
/// returns a file of `shaders/` by name.
pub fn sources_hash(
    source: &str,
    defines: &[(String, String)],
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<u64, String> {
    let mut h = fnv1a(source.as_bytes(), FNV_START);
    for (k, v) in defines {
        h = fnv1a(format!("\n{k}={v}").as_bytes(), h);
    }
    let mut seen = HashSet::new();
    let mut stack = vec![source.to_string()];
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let text = read(&name)?;
        h = fnv1a(format!("\n--- {name}\n").as_bytes(), h);
        h = fnv1a(text.as_bytes(), h);
        // Includes in reverse so that the first one is hashed next.
        let includes: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("#include"))
            .filter_map(|rest| rest.trim().strip_prefix('"')?.strip_suffix('"').map(str::to_string))
            .collect();
        stack.extend(includes.into_iter().rev());
    }
    Ok(h)
}

/// The generator's hash from the text of [`GENERATOR_FILES`].
pub fn generator_hash(read_root: &dyn Fn(&str) -> Result<String, String>) -> Result<u64, String> {
    let mut h = FNV_START;
    for f in GENERATOR_FILES {
        h = fnv1a(read_root(f)?.as_bytes(), h);
    }
    Ok(h)
}

/// The manifest's text.
pub fn render(generator: u64, entries: &[Entry]) -> String {
    let mut s = format!(
        "# Written by tools/shader-gen with the SPIR-V beside it: do not edit.\n\
         generator\t{generator:016x}\n"
    );
    for e in entries {
        let defines: Vec<String> = e.defines.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("{}\t{}\t{}\t{:016x}\t{:016x}\n", e.name, e.source, defines.join(","), e.sources, e.spirv));
    }
    s
}

/// Reads a manifest back: the generator's hash and every entry.
pub fn parse(text: &str) -> Result<(u64, Vec<Entry>), String> {
    let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|e| format!("manifest: bad hash {s:?}: {e}"));
    let mut generator = None;
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["generator", h] => generator = Some(hex(h)?),
            [name, source, defines, sources, spirv] => {
                let defines = defines
                    .split(',')
                    .filter(|d| !d.is_empty())
                    .map(|d| d.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("manifest: bad defines in {line:?}"))?;
                entries.push(Entry {
                    name: name.to_string(),
                    source: source.to_string(),
                    defines,
                    sources: hex(sources)?,
                    spirv: hex(spirv)?,
                });
            }
            _ => return Err(format!("manifest: unreadable line {line:?}")),
        }
    }
    Ok((generator.ok_or("manifest: no generator line")?, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn read_in(dir: PathBuf) -> impl Fn(&str) -> Result<String, String> {
        move |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| format!("{name}: {e}"))
    }

    const REGENERATE: &str =
        "regenerate with `bash scripts/shaders.sh` (or `cargo run --release --manifest-path tools/shader-gen/Cargo.toml`) and commit the result";

    /// The committed SPIR-V is what shader-gen makes of the committed shaders: every module's
    /// sources and bytes hash as recorded, the generator is the one that recorded them, and
    /// the manifest, the modules embedded by `spirv/index.rs` and the `.spv` files agree.
    #[test]
    fn committed_spirv_matches_the_shader_sources() {
        let root = root();
        let text = std::fs::read_to_string(root.join("backends/vulkan/spirv").join(FILE))
            .unwrap_or_else(|e| panic!("{FILE}: {e}; {REGENERATE}"));
        let (generator, entries) = parse(&text).unwrap();
        let now = generator_hash(&read_in(root.clone())).unwrap();
        assert_eq!(generator, now, "tools/shader-gen changed since the SPIR-V was generated: {REGENERATE}");
        let shaders = read_in(root.join("shaders"));
        let mut stale = Vec::new();
        for e in &entries {
            let sources = sources_hash(&e.source, &e.defines, &shaders).unwrap();
            let spv = std::fs::read(root.join("backends/vulkan/spirv").join(format!("{}.spv", e.name)))
                .unwrap_or_else(|err| panic!("{}.spv: {err}; {REGENERATE}", e.name));
            if sources != e.sources {
                stale.push(format!("{} (its GLSL changed)", e.name));
            } else if fnv1a(&spv, FNV_START) != e.spirv {
                stale.push(format!("{}.spv (not what shader-gen wrote)", e.name));
            }
        }
        assert!(stale.is_empty(), "stale SPIR-V: {}; {REGENERATE}", stale.join(", "));
        let listed: HashSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        let embedded: HashSet<&str> = crate::kernels::Kernels::module_names().collect();
        assert_eq!(listed, embedded, "the manifest and spirv/index.rs list different modules; {REGENERATE}");
    }

    /// Every shader file is named in shaders/README.md, under its family's folder.
    #[test]
    fn every_shader_file_is_described_in_the_readme() {
        let shaders = root().join("shaders");
        let readme = std::fs::read_to_string(shaders.join("README.md")).unwrap();
        let mut missing = Vec::new();
        for dir in std::fs::read_dir(&shaders).unwrap().flatten().filter(|e| e.path().is_dir()) {
            let family = dir.file_name().to_string_lossy().to_string();
            let section =
                readme.split(&format!("**`{family}/`**")).nth(1).map(|s| s.split("| **`").next().unwrap_or(""));
            for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
                let name = f.file_name().to_string_lossy().to_string();
                if !section.is_some_and(|s| s.contains(&format!("`{name}`"))) {
                    missing.push(format!("{family}/{name}"));
                }
            }
        }
        assert!(missing.is_empty(), "not described in shaders/README.md: {}", missing.join(", "));
    }

    /// The check catches what it is for: an edit to an included file, a define, or the SPIR-V.
    #[test]
    fn an_edited_include_or_define_changes_the_hash() {
        let files = |inc: &'static str| {
            move |name: &str| match name {
                "a.comp" => Ok("#version 450\n#include \"b.glsl\"\nvoid main() {}\n".to_string()),
                "b.glsl" => Ok(inc.to_string()),
                other => Err(format!("no {other}")),
            }
        };
        let d = vec![("TYPE".to_string(), "2".to_string())];
        let base = sources_hash("a.comp", &d, &files("float x;")).unwrap();
        assert_eq!(base, sources_hash("a.comp", &d, &files("float x;")).unwrap());
        assert_ne!(base, sources_hash("a.comp", &d, &files("float y;")).unwrap(), "an include's edit");
        let d3 = vec![("TYPE".to_string(), "3".to_string())];
        assert_ne!(base, sources_hash("a.comp", &d3, &files("float x;")).unwrap(), "a define");
        assert!(sources_hash("a.comp", &d, &|_| Err("missing".into())).is_err());
        let e = Entry { name: "a".into(), source: "a.comp".into(), defines: d, sources: base, spirv: 7 };
        assert_eq!(parse(&render(1, std::slice::from_ref(&e))).unwrap(), (1, vec![e]));
    }
}
