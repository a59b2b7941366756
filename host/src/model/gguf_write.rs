//! Writing GGUF files: used by `zinc synth` and by tests that need well-formed (and then
//! deliberately broken) files.

use super::gguf::Value;
use std::io::{self, Write};
use zinc_formats::GgmlType;

/// A GGUF v3 file being assembled in memory order: metadata, tensor infos, aligned data.
/// Tensor bytes are either given up front ([`GgufWriter::tensor`]) or produced while
/// writing ([`GgufWriter::tensor_spec`] and [`GgufWriter::write_streaming`]), so files larger
/// than memory can be written.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

/// Bytes of a tensor of `dims` and `dtype`.
pub fn tensor_bytes(dims: &[u64], dtype: GgmlType) -> usize {
    dtype.bytes_for(dims.iter().product()).expect("whole blocks") as usize
}

const ALIGN: usize = 32;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_str(out, s),
        Value::Array(items) => {
            let elem = items.first().map_or(4, type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry.
    pub fn meta(&mut self, key: &str, v: Value) -> &mut Self {
        self.metadata.push((key.to_string(), v));
        self
    }

    /// Adds a tensor; `data` must be its exact encoded bytes.
    pub fn tensor(&mut self, name: &str, dims: &[u64], dtype: GgmlType, data: Vec<u8>) -> &mut Self {
        debug_assert_eq!(Some(data.len() as u64), dtype.bytes_for(dims.iter().product()));
        self.tensors.push((name.to_string(), dims.to_vec(), dtype, data));
        self
    }

    /// Declares a tensor whose bytes `write_streaming` will ask for.
    pub fn tensor_spec(&mut self, name: &str, dims: &[u64], dtype: GgmlType) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), dtype, Vec::new()));
        self
    }

    /// Writes the file, asking `fill(index, name, buffer)` for each declared tensor's bytes
    /// (the buffer has the tensor's exact size); tensors given with data are written as is.
    pub fn write_streaming(&self, w: &mut impl Write, mut fill: impl FnMut(usize, &str, &mut [u8])) -> io::Result<()> {
        let (header, _) = self.header();
        w.write_all(&header)?;
        w.write_all(&vec![0u8; header.len().div_ceil(ALIGN) * ALIGN - header.len()])?;
        let mut buf = Vec::new();
        for (i, (name, dims, dtype, data)) in self.tensors.iter().enumerate() {
            let len = tensor_bytes(dims, *dtype);
            if data.len() == len {
                w.write_all(data)?;
            } else {
                buf.clear();
                buf.resize(len, 0);
                fill(i, name, &mut buf);
                w.write_all(&buf)?;
            }
            w.write_all(&vec![0u8; len.div_ceil(ALIGN) * ALIGN - len])?;
        }
        Ok(())
    }

    /// The header (everything before the data section), and the data offsets.
    fn header(&self) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&type_id(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offsets = Vec::new();
        let mut offset = 0u64;
        for (name, dims, dtype, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&dtype.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            let len = tensor_bytes(dims, *dtype) as u64;
            debug_assert!(data.is_empty() || data.len() as u64 == len);
            offset = (offset + len).div_ceil(ALIGN as u64) * ALIGN as u64;
        }
        (out, offsets)
    }

    /// Writes the file (every tensor must have been given with its data).
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        self.write_streaming(w, |_, name, _| panic!("tensor {name} was declared without data"))
    }

    /// The whole file in memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }
}
