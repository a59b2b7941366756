//! The GGUF reader against well-formed and hostile files.

use super::{
    gguf::{GgufFile, Value},
    gguf_write::GgufWriter,
};
use memmap2::MmapMut;
use std::sync::Arc;
use zinc_formats::GgmlType;

fn parse(bytes: &[u8]) -> Result<GgufFile, super::gguf::GgufError> {
    let mut m = MmapMut::map_anon(bytes.len().max(1)).unwrap();
    m[..bytes.len()].copy_from_slice(bytes);
    let m = m.make_read_only().unwrap();
    GgufFile::parse(Arc::new(m), "test.gguf")
}

fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U32(2))
        .meta("tokenizer.ggml.tokens", Value::Array(vec![Value::String("a".into()), Value::String("b".into())]))
        .meta("x.f", Value::F32(1.5));
    let f32t = GgmlType::F32;
    let q8 = GgmlType::Q8_0;
    w.tensor("a", &[4, 2], f32t, (0..32u8).collect());
    w.tensor("b", &[32], q8, vec![7u8; 34]);
    w.to_bytes()
}

#[test]
fn a_written_file_reads_back_exactly() {
    let f = parse(&sample()).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(f.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap().len(), 2);
    let a = f.tensor("a").unwrap();
    assert_eq!(a.dims, vec![4, 2]);
    assert_eq!(f.bytes(a), &(0..32u8).collect::<Vec<_>>()[..]);
    assert_eq!(f.bytes(f.tensor("b").unwrap()), &[7u8; 34][..]);
    assert_eq!(f.tensor("b").unwrap().file_offset % 32, 0);
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = sample();
    for len in 1..bytes.len() - 1 {
        // Padding after the last tensor is not needed; the tensor itself is.
        let r = parse(&bytes[..len]);
        if len < bytes.len() - 30 {
            assert!(r.is_err(), "truncated to {len} bytes still parsed");
        }
    }
}

#[test]
fn random_corruption_never_panics() {
    let bytes = sample();
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed % b.len() as u64) as usize;
            b[i] = (seed >> 32) as u8;
        }
        let _ = parse(&b);
    }
}

fn header_with(tensors: u64, kvs: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&tensors.to_le_bytes());
    b.extend_from_slice(&kvs.to_le_bytes());
    b.extend_from_slice(rest);
    b
}

#[test]
fn hostile_counts_and_lengths_are_refused_with_a_reason() {
    let e = parse(&header_with(u64::MAX, 0, &[])).unwrap_err();
    assert!(e.what.contains("tensor count"), "{e}");
    let e = parse(&header_with(0, 1 << 40, &[])).unwrap_err();
    assert!(e.what.contains("metadata count"), "{e}");
    // A key whose length claims 2^60 bytes.
    let mut huge_key = (1u64 << 60).to_le_bytes().to_vec();
    huge_key.extend_from_slice(&[0u8; 16]);
    let e = parse(&header_with(0, 1, &huge_key)).unwrap_err();
    assert!(e.what.contains("string length"), "{e}");
    // An array claiming 2^23 u64s with nothing behind it.
    let mut kv = Vec::new();
    kv.extend_from_slice(&1u64.to_le_bytes());
    kv.push(b'k');
    kv.extend_from_slice(&9u32.to_le_bytes());
    kv.extend_from_slice(&10u32.to_le_bytes());
    kv.extend_from_slice(&(1u64 << 23).to_le_bytes());
    kv.extend_from_slice(&[0u8; 64]);
    let e = parse(&header_with(0, 1, &kv)).unwrap_err();
    assert!(e.what.contains("cannot fit"), "{e}");
    assert!(e.to_string().contains("test.gguf") && e.to_string().contains("at byte"), "{e}");
}

#[test]
fn bad_tensors_are_refused_with_their_names() {
    let f32t = GgmlType::F32;
    let mut w = GgufWriter::new();
    w.tensor("huge", &[4], f32t, vec![0; 16]);
    let mut bytes = w.to_bytes();
    // dims[0] lives after: magic 4, version 4, counts 16, name len 8 + "huge" 4, n_dims 4.
    let dim_at = 4 + 4 + 16 + 8 + 4 + 4;
    bytes[dim_at..dim_at + 8].copy_from_slice(&(1u64 << 30).to_le_bytes());
    let e = parse(&bytes).unwrap_err();
    assert!(e.what.contains("huge") && e.what.contains("past the end"), "{e}");

    let mut bytes = w.to_bytes();
    let type_at = dim_at + 8;
    bytes[type_at..type_at + 4].copy_from_slice(&99u32.to_le_bytes());
    let e = parse(&bytes).unwrap_err();
    assert!(e.what.contains("unsupported type id 99") && e.what.contains("huge"), "{e}");

    // Rows of 4 elements are not whole K-quant or IQ4_XS super-blocks (256).
    for (id, name) in [(12u32, "q4_k"), (14, "q6_k"), (23, "iq4_xs")] {
        let mut bytes = w.to_bytes();
        bytes[type_at..type_at + 4].copy_from_slice(&id.to_le_bytes());
        let e = parse(&bytes).unwrap_err();
        assert!(e.what.contains("huge") && e.what.contains(name) && e.what.contains("256"), "{e}");
    }

    let mut bytes = w.to_bytes();
    let off_at = type_at + 4;
    bytes[off_at..off_at + 8].copy_from_slice(&3u64.to_le_bytes());
    let e = parse(&bytes).unwrap_err();
    assert!(e.what.contains("not aligned"), "{e}");

    let mut bytes = w.to_bytes();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(parse(&bytes).unwrap_err().what.contains("version 1"));
    assert!(parse(b"GGML\x03\0\0\0").unwrap_err().what.contains("magic"));
}
