//! Compiles `shaders/*.comp` into the SPIR-V that `backends/vulkan` embeds, with a glslang
//! new enough for integer dot products (the `shaderc` crate built from source).
//!
//! ```text
//! cargo run --release --manifest-path tools/shader-gen/Cargo.toml            # regenerate
//! cargo run --release --manifest-path tools/shader-gen/Cargo.toml -- --check # CI: fail if stale
//! ```
//!
//! The output is `backends/vulkan/spirv/*.spv` plus `index.rs`, which lists every module by
//! name. Each variant is one source file compiled with a set of defines (the tensor type of a
//! matrix kernel, whether it uses the integer dot product instruction).

#[path = "../../../backends/vulkan/src/spirv_manifest.rs"]
#[allow(dead_code)]
mod spirv_manifest;

use std::{
    fs,
    path::{Path, PathBuf},
    process::ExitCode,
};

/// Tensor types with their ggml ids, as the dequantizer's `TYPE` define expects them.
const TYPES: &[(&str, u32)] = &[
    ("f32", 0),
    ("f16", 1),
    ("q4_0", 2),
    ("q4_1", 3),
    ("q5_0", 6),
    ("q5_1", 7),
    ("q8_0", 8),
    ("q2_k", 10),
    ("q3_k", 11),
    ("q4_k", 12),
    ("q5_k", 13),
    ("q6_k", 14),
    ("q8_k", 15),
    ("iq4_nl", 20),
    ("iq4_xs", 23),
    ("bf16", 30),
];

/// The formats whose matrix kernels take 8-bit activations: the 32-element formats (IQ4_NL
/// too), and the K-quants and IQ4_XS that shaders/kblock.glsl reads as 32-element blocks.
const Q8_TYPES: &[&str] = &["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"];

/// The 32-element formats (every other type also has the float kernels, which dequantize).
const BLOCK32_TYPES: &[&str] = &["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"];

/// One SPIR-V module to build.
struct Variant {
    name: String,
    source: String,
    defines: Vec<(&'static str, String)>,
}

fn variants() -> Vec<Variant> {
    let mut out: Vec<Variant> = [
        "rms_norm",
        "rope",
        "elementwise",
        "gather_rows",
        "kv_store",
        "rope_kv_store",
        "attention",
        "attention_tiled",
        "attention_tiled_cm",
        "attention_merge",
        "quantize_q8",
        "q8_to_half",
        "swiglu_q8",
        "moe_group",
        "moe_route",
        "moe_combine",
    ]
    .iter()
    .map(|n| Variant { name: n.to_string(), source: format!("{n}.comp"), defines: vec![] })
    .collect();
    // One-row attention with its softmax reductions as subgroup operations, and both with
    // the head norms, RoPE and KV store of decode rows done in each head's workgroup.
    for (name, sg, prelude) in [
        ("attention_sg", 1, 0),
        ("attention_prelude", 0, 1),
        ("attention_prelude_sg", 1, 1),
    ] {
        out.push(Variant {
            name: name.into(),
            source: "attention.comp".into(),
            defines: vec![("SG_REDUCE", sg.to_string()), ("PRELUDE", prelude.to_string())],
        });
    }
    // The norm for devices that offer less workgroup memory than the staged row takes.
    out.push(Variant {
        name: "rms_norm_lowmem".into(),
        source: "rms_norm.comp".into(),
        defines: vec![("LOW_MEM", "1".into())],
    });
    for &(ty, id) in TYPES {
        out.push(Variant {
            name: format!("embed_{ty}"),
            source: "embed.comp".into(),
            defines: vec![("TYPE", id.to_string())],
        });
        if Q8_TYPES.contains(&ty) {
            // Matrix-unit products: plain 64 × 128 tiles, wide 128 × 128 tiles (eight
            // subgroups), and 64-slot expert tiles.
            for (kind, wide, grouped) in [("", 0, 0), ("_wide", 1, 0), ("_grouped", 0, 1)] {
                out.push(Variant {
                    name: format!("matmul_coopmat{kind}_{ty}"),
                    source: "matmul_coopmat.comp".into(),
                    defines: vec![
                        ("TYPE", id.to_string()),
                        ("WIDE", wide.to_string()),
                        ("GROUPED", grouped.to_string()),
                    ],
                });
            }
            for int_dot in [0, 1] {
                let suffix = if int_dot == 1 { "_idot" } else { "" };
                for (kind, source) in [("matmul_q8", "matmul_q8.comp"), ("matmul_q8_tiled", "matmul_q8_tiled.comp")] {
                    out.push(Variant {
                        name: format!("{kind}_{ty}{suffix}"),
                        source: source.into(),
                        defines: vec![("TYPE", id.to_string()), ("INT_DOT", int_dot.to_string())],
                    });
                }
                // Expert products at decode, features grouped per subgroup; gate and up with
                // SwiGLU as their epilogue (`_swiglu`); the down products with the weighted sum
                // of the slots (`_combine`).
                for (kind, swiglu, combine) in [("", 0, 0), ("_swiglu", 1, 0), ("_combine", 0, 1)] {
                    out.push(Variant {
                        name: format!("matvec_q8{kind}_{ty}{suffix}"),
                        source: "matvec_q8.comp".into(),
                        defines: vec![
                            ("TYPE", id.to_string()),
                            ("INT_DOT", int_dot.to_string()),
                            ("SWIGLU", swiglu.to_string()),
                            ("COMBINE", combine.to_string()),
                        ],
                    });
                }
                // Row kernels with subgroup sums (devices with 32-wide subgroups, integer-dot
                // ones only) and with the RoPE / KV-store epilogue of llama's Q, K and V.
                let sg_options: &[u32] = if int_dot == 1 { &[0, 1] } else { &[0] };
                for &sg in sg_options {
                    for rope in [0, 1] {
                        if sg == 0 && rope == 0 {
                            continue;
                        }
                        let name = format!(
                            "matmul_q8{}_{ty}{suffix}{}",
                            if rope == 1 { "_rope" } else { "" },
                            if sg == 1 { "_sg" } else { "" }
                        );
                        let defines = vec![
                            ("TYPE", id.to_string()),
                            ("INT_DOT", int_dot.to_string()),
                            ("SG_REDUCE", sg.to_string()),
                            ("ROPE_KV", rope.to_string()),
                        ];
                        out.push(Variant { name, source: "matmul_q8.comp".into(), defines });
                    }
                    if sg == 1 {
                        // Decode with the activation row in shared memory, 512-wide workgroups
                        // (`_sgx`; 32-wide subgroups only, like `_sg`), plain and with the
                        // RoPE / KV-store epilogue (whose norm is always folded in), and gate and up
                        // with the SwiGLU and its 8-bit copy as their epilogue (`_glu`).
                        for (kind, rope, glu) in [("", 0, 0), ("_rope", 1, 0), ("_glu", 0, 1)] {
                            out.push(Variant {
                                name: format!("matmul_q8{kind}_{ty}{suffix}_sgx"),
                                source: "matmul_q8.comp".into(),
                                defines: vec![
                                    ("TYPE", id.to_string()),
                                    ("INT_DOT", int_dot.to_string()),
                                    ("SG_REDUCE", "1".into()),
                                    ("ROPE_KV", rope.to_string()),
                                    ("GLU_OUT", glu.to_string()),
                                    ("SHARED_X", "1".into()),
                                    ("WG_SIZE", "512".into()),
                                ],
                            });
                        }
                    }
                }
            }
        }
        if !BLOCK32_TYPES.contains(&ty) {
            for (kind, source) in [("matmul", "matmul.comp"), ("matmul_float_tiled", "matmul_float_tiled.comp")] {
                out.push(Variant {
                    name: format!("{kind}_{ty}"),
                    source: source.into(),
                    defines: vec![("TYPE", id.to_string())],
                });
            }
            if ty == "f32" {
                // The normed MoE router with its sums as subgroup operations.
                out.push(Variant {
                    name: "matmul_f32_sg".into(),
                    source: "matmul.comp".into(),
                    defines: vec![("TYPE", id.to_string()), ("SG_REDUCE", "1".into())],
                });
            }
            // Float tiles without their padding, for devices that offer exactly 32 KiB of
            // workgroup memory.
            out.push(Variant {
                name: format!("matmul_float_tiled_{ty}_lowmem"),
                source: "matmul_float_tiled.comp".into(),
                defines: vec![("TYPE", id.to_string()), ("LOW_MEM", "1".into())],
            });
        }
    }
    out
}

fn compile(compiler: &shaderc::Compiler, dir: &Path, v: &Variant) -> Result<Vec<u8>, String> {
    let path = dir.join(&v.source);
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut opts = shaderc::CompileOptions::new().map_err(|e| format!("shaderc: {e}"))?;
    opts.set_target_env(shaderc::TargetEnv::Vulkan, shaderc::EnvVersion::Vulkan1_2 as u32);
    opts.set_optimization_level(shaderc::OptimizationLevel::Performance);
    for (k, val) in &v.defines {
        opts.add_macro_definition(k, Some(val));
    }
    let include_dir = dir.to_path_buf();
    opts.set_include_callback(move |name, _, _, _| {
        let p = include_dir.join(name);
        fs::read_to_string(&p)
            .map(|content| shaderc::ResolvedInclude { resolved_name: name.to_string(), content })
            .map_err(|e| format!("{}: {e}", p.display()))
    });
    let art = compiler
        .compile_into_spirv(&text, shaderc::ShaderKind::Compute, &v.source, "main", Some(&opts))
        .map_err(|e| format!("{} ({}): {e}", v.name, v.source))?;
    Ok(art.as_binary_u8().to_vec())
}

fn index_rs(vs: &[Variant]) -> String {
    let mut s = String::from(
        "// Generated by tools/shader-gen from shaders/: do not edit. Regenerate with\n\
         // `cargo run --release --manifest-path tools/shader-gen/Cargo.toml`.\n\
         /// Every SPIR-V module, by name.\n\
         pub const MODULES: &[(&str, &[u8])] = &[\n",
    );
    for v in vs {
        s.push_str(&format!("    (\"{0}\", include_bytes!(\"{0}.spv\")),\n", v.name));
    }
    s.push_str("];\n");
    s
}

/// The manifest beside the SPIR-V (backends/vulkan/src/spirv_manifest.rs): each module's
/// sources and bytes hashed, and the generator's hash.
fn manifest(root: &Path, src: &Path, vs: &[Variant], files: &[(PathBuf, Vec<u8>)]) -> Result<String, String> {
    use spirv_manifest::*;
    let read_root = |name: &str| fs::read_to_string(root.join(name)).map_err(|e| format!("{name}: {e}"));
    let read_src = |name: &str| fs::read_to_string(src.join(name)).map_err(|e| format!("{name}: {e}"));
    let mut entries = Vec::new();
    for (v, (_, bytes)) in vs.iter().zip(files) {
        let defines: Vec<(String, String)> = v.defines.iter().map(|(k, val)| (k.to_string(), val.clone())).collect();
        entries.push(Entry {
            name: v.name.clone(),
            source: v.source.clone(),
            sources: sources_hash(&v.source, &defines, &read_src)?,
            defines,
            spirv: fnv1a(bytes, FNV_START),
        });
    }
    Ok(render(generator_hash(&read_root)?, &entries))
}

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = here.canonicalize().unwrap_or(here);
    let (src, dst) = (root.join("shaders"), root.join("backends/vulkan/spirv"));
    let Ok(compiler) = shaderc::Compiler::new() else {
        eprintln!("shader-gen: shaderc failed to start");
        return ExitCode::FAILURE;
    };
    let vs = variants();
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for v in &vs {
        match compile(&compiler, &src, v) {
            Ok(b) => files.push((dst.join(format!("{}.spv", v.name)), b)),
            Err(e) => {
                eprintln!("shader-gen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    files.push((dst.join("index.rs"), index_rs(&vs).into_bytes()));
    match manifest(&root, &src, &vs, &files) {
        Ok(text) => files.push((dst.join(spirv_manifest::FILE), text.into_bytes())),
        Err(e) => {
            eprintln!("shader-gen: {e}");
            return ExitCode::FAILURE;
        }
    }
    if check {
        let stale: Vec<String> = files
            .iter()
            .filter(|(p, b)| fs::read(p).ok().as_deref() != Some(b.as_slice()))
            .map(|(p, _)| p.display().to_string())
            .collect();
        let expected: std::collections::HashSet<_> = files.iter().map(|(p, _)| p.clone()).collect();
        let extra: Vec<String> = fs::read_dir(&dst)
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| !expected.contains(p)).collect::<Vec<_>>())
            .unwrap_or_default()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        if stale.is_empty() && extra.is_empty() {
            println!("shader-gen: {} SPIR-V modules are current", vs.len());
            return ExitCode::SUCCESS;
        }
        for p in stale {
            eprintln!("shader-gen: stale or missing: {p}");
        }
        for p in extra {
            eprintln!("shader-gen: not generated from shaders/: {p}");
        }
        eprintln!(
            "shader-gen: run `cargo run --release --manifest-path tools/shader-gen/Cargo.toml` and commit the result"
        );
        return ExitCode::FAILURE;
    }
    if let Err(e) = fs::create_dir_all(&dst) {
        eprintln!("shader-gen: {}: {e}", dst.display());
        return ExitCode::FAILURE;
    }
    for (p, b) in &files {
        if let Err(e) = fs::write(p, b) {
            eprintln!("shader-gen: {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
    }
    // Modules of variants no longer listed go too (the check above would fail on them).
    let expected: std::collections::HashSet<_> = files.iter().map(|(p, _)| p.clone()).collect();
    for old in fs::read_dir(&dst).into_iter().flatten().flatten().map(|e| e.path()) {
        if old.extension().is_some_and(|x| x == "spv") && !expected.contains(&old) {
            if let Err(e) = fs::remove_file(&old) {
                eprintln!("shader-gen: {}: {e}", old.display());
                return ExitCode::FAILURE;
            }
            println!("shader-gen: removed {}", old.display());
        }
    }
    println!("shader-gen: wrote {} SPIR-V modules to {}", vs.len(), dst.display());
    ExitCode::SUCCESS
}
