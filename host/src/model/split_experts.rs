//! Mixtral files from llama.cpp's first MoE conversions hold one tensor per expert
//! (`blk.N.ffn_gate.E.weight`, `ffn_up.E`, `ffn_down.E`) where later files stack a layer's
//! experts in one tensor (`blk.N.ffn_gate_exps.weight`, the expert the slowest dimension). At
//! load the per-expert tensors are copied into stacked ones, as llama.cpp merges them, so the
//! programs and backends see one layout. The copy holds those experts in memory beside the
//! mapped file (a file's size at most); re-converting such a file with a current llama.cpp
//! stacks them on disk instead.

use super::gguf::GgufFile;
use anyhow::{bail, Context, Result};

/// The most experts a layer may have (as the MoE programs accept).
const MAX_EXPERTS: u64 = 1024;

/// The feed-forward matrices an expert has.
const KINDS: [&str; 3] = ["gate", "up", "down"];

/// Adds a stacked tensor for every layer and kind that the file holds only per expert;
/// a file without per-expert tensors is left as it is. An expert missing, or one whose type
/// or shape differs from expert 0's, is an error naming the tensor.
pub fn stack_split_experts(f: &mut GgufFile) -> Result<()> {
    let Ok(arch) = f.get_str("general.architecture").map(str::to_string) else { return Ok(()) };
    let n_expert = f.get(&format!("{arch}.expert_count")).and_then(|v| v.as_u64()).unwrap_or(0);
    if n_expert == 0 || n_expert > MAX_EXPERTS {
        // No experts, or a count the program refuses with its own message.
        return Ok(());
    }
    let firsts: Vec<(String, &str)> = f
        .tensors
        .iter()
        .filter_map(|t| {
            let layer = t.name.strip_prefix("blk.")?.split_once('.')?.0.parse::<u64>().ok()?;
            let kind = KINDS.into_iter().find(|k| t.name == format!("blk.{layer}.ffn_{k}.0.weight"))?;
            Some((format!("blk.{layer}.ffn_{kind}"), kind))
        })
        .collect();
    for (prefix, _) in firsts {
        let stacked = format!("{prefix}_exps.weight");
        if f.tensor(&stacked).is_some() {
            continue;
        }
        let first = format!("{prefix}.0.weight");
        let t0 = f.tensor(&first).expect("found above").clone();
        let mut parts = Vec::with_capacity(n_expert as usize);
        for e in 0..n_expert {
            let name = format!("{prefix}.{e}.weight");
            let t = f.tensor(&name).with_context(|| {
                format!("{}: tensor {name} is missing (expert {e} of {n_expert}; {first} is there)", f.path)
            })?;
            if t.dims != t0.dims || t.dtype != t0.dtype {
                bail!(
                    "{}: tensor {name} is {} {:?}; expected {} {:?} as {first}",
                    f.path,
                    t.dtype,
                    t.dims,
                    t0.dtype,
                    t0.dims
                );
            }
            parts.push(t.clone());
        }
        let mut bytes = Vec::with_capacity(t0.len * n_expert as usize);
        for t in &parts {
            bytes.extend_from_slice(f.bytes(t));
        }
        let mut dims = t0.dims.clone();
        dims.push(n_expert);
        f.add_assembled(stacked, dims, t0.dtype, bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{gguf::Value, gguf_write::GgufWriter, loaded::Model, synth};
    use memmap2::MmapMut;
    use std::sync::Arc;
    use zinc_formats::GgmlType;

    fn parse(bytes: &[u8]) -> GgufFile {
        let mut m = MmapMut::map_anon(bytes.len()).unwrap();
        m.copy_from_slice(bytes);
        GgufFile::parse(Arc::new(m.make_read_only().unwrap()), "split.gguf").unwrap()
    }

    /// A llama file with `n_expert` experts and the per-expert gate tensors `present`, each
    /// 4 × 2 f32 (expert e's values e·8 .. e·8 + 7), expert `odd` 4 × 3 instead.
    fn experts_file(n_expert: u32, present: &[u32], odd: Option<u32>) -> GgufFile {
        let mut w = GgufWriter::new();
        w.meta("general.architecture", Value::String("llama".into())).meta("llama.expert_count", Value::U32(n_expert));
        for &e in present {
            let rows = if odd == Some(e) { 3 } else { 2 };
            let data = (0..4 * rows).flat_map(|i| ((e * 8 + i) as f32).to_le_bytes()).collect();
            w.tensor(&format!("blk.0.ffn_gate.{e}.weight"), &[4, rows as u64], GgmlType::F32, data);
        }
        parse(&w.to_bytes())
    }

    #[test]
    fn per_expert_tensors_are_stacked_in_expert_order() {
        let mut f = experts_file(3, &[2, 0, 1], None);
        stack_split_experts(&mut f).unwrap();
        let t = f.tensor("blk.0.ffn_gate_exps.weight").expect("stacked").clone();
        assert_eq!((t.dims.clone(), t.dtype), (vec![4, 2, 3], GgmlType::F32));
        let values: Vec<f32> = f.bytes(&t).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(values, (0..24).map(|v| v as f32).collect::<Vec<_>>());
    }

    #[test]
    fn a_missing_or_misshapen_expert_is_named() {
        let e = stack_split_experts(&mut experts_file(3, &[0, 1], None)).unwrap_err().to_string();
        assert!(e.contains("blk.0.ffn_gate.2.weight is missing"), "{e}");
        let e = stack_split_experts(&mut experts_file(3, &[0, 1, 2], Some(1))).unwrap_err().to_string();
        assert!(e.contains("blk.0.ffn_gate.1.weight is f32 [4, 3]; expected f32 [4, 2]"), "{e}");
    }

    /// `zinc synth`'s split Mixtral file loads into the same program as the stacked one: every
    /// tensor the program reads has the same bytes.
    #[test]
    fn a_split_mixtral_file_loads_as_the_stacked_one() {
        let donor = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let dir = std::env::temp_dir().join(format!("zinc-split-experts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |preset: &str| {
            let path = dir.join(format!("{preset}.gguf"));
            synth::write_synthetic(&synth::preset(preset).unwrap(), &donor, &path, |_, _| {}).unwrap();
            Model::load(&path).unwrap()
        };
        let (stacked, split) = (load("tiny-mixtral"), load("tiny-mixtral-split"));
        assert!(
            split.file.tensor("blk.0.ffn_up.7.weight").is_some()
                && split.file.tensor("blk.0.ffn_up_exps.weight").is_some()
        );
        assert!(stacked.file.tensor("blk.0.ffn_up.0.weight").is_none());
        let (a, b) = (&stacked.program.tensors, &split.program.tensors);
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b.iter()) {
            assert_eq!((x.name.as_str(), &x.dims, x.dtype), (y.name.as_str(), &y.dims, y.dtype));
            // SAFETY: both programs' tensors point into their models' files, alive here.
            let (bx, by) =
                unsafe { (std::slice::from_raw_parts(x.data, x.len), std::slice::from_raw_parts(y.data, y.len)) };
            assert!(bx == by, "{} differs", x.name);
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
