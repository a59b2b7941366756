//! A GGUF reader (versions 2 and 3) that treats the file as hostile input.
//!
//! The file is memory-mapped and tensors are borrowed from the map, never copied. Every
//! count, length, dimension and offset is checked before it sizes an allocation or an
//! index: strings and arrays against fixed caps and against the bytes left in the file,
//! tensor extents against the data section. Errors name the file, the byte offset and what
//! was wrong.

use memmap2::Mmap;
use std::{collections::BTreeMap, fmt, path::Path, sync::Arc};
use zinc_formats::GgmlType;

/// Longest metadata string accepted (chat templates are the longest real ones, ~10 KiB).
pub const MAX_STRING_BYTES: u64 = 16 << 20;
/// Most elements in one metadata array (vocabularies reach ~260k).
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Most metadata entries.
pub const MAX_METADATA: u64 = 1 << 16;
/// Most tensors.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most dimensions of one tensor.
pub const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays inside arrays.
pub const MAX_ARRAY_DEPTH: u32 = 2;
/// Largest alignment accepted.
pub const MAX_ALIGNMENT: u64 = 1 << 16;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::Bool(b) => Some(b as u64),
            _ => None,
        }
    }
    /// The value as a float, when numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A tensor's header entry, checked against the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// GGUF tensor name.
    pub name: String,
    /// Dimensions, fastest-varying first.
    pub dims: Vec<u64>,
    /// Storage type.
    pub dtype: GgmlType,
    /// Offset from the start of the file (already checked to lie inside it), or of the
    /// assembled tensor's bytes in [`GgufFile::assembled`].
    pub file_offset: usize,
    /// Byte length.
    pub len: usize,
    /// Where the bytes are.
    pub source: TensorSource,
}

/// Where a tensor's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorSource {
    /// In the file, at `file_offset`.
    File,
    /// Assembled at load from tensors of the file (Mixtral's per-expert tensors stacked), in
    /// [`GgufFile::assembled`] at this index.
    Assembled(usize),
}

impl TensorInfo {
    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Why a file was rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufError {
    /// The file, for the message.
    pub file: String,
    /// Byte offset where the problem was found.
    pub at: u64,
    /// What was wrong.
    pub what: String,
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: not a usable GGUF file: at byte {}: {}", self.file, self.at, self.what)
    }
}

impl std::error::Error for GgufError {}

/// An open, validated GGUF file.
pub struct GgufFile {
    map: Arc<Mmap>,
    /// The path it was opened from.
    pub path: String,
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata, by key.
    pub metadata: BTreeMap<String, Value>,
    /// Tensor headers, in file order, then any assembled at load.
    pub tensors: Vec<TensorInfo>,
    /// The bytes of tensors assembled at load ([`TensorSource::Assembled`]).
    assembled: Vec<Box<[u8]>>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: impl Into<String>) -> GgufError {
        GgufError { file: self.file.to_string(), at: self.pos as u64, what: what.into() }
    }
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        if (n as u64) > self.remaining() {
            return Err(self.err(format!("needs {n} more bytes but the file ends")));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// A count: u64 in v2/v3 (v1 used u32 and is refused earlier).
    fn count(&mut self, what: &str, cap: u64, min_elem_bytes: u64) -> Result<usize, GgufError> {
        let n = self.u64()?;
        if n > cap {
            return Err(self.err(format!("{what} count {n} exceeds the limit of {cap}")));
        }
        if n.saturating_mul(min_elem_bytes) > self.remaining() {
            return Err(self.err(format!("{what} count {n} cannot fit in the {} bytes left", self.remaining())));
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> Result<String, GgufError> {
        let len = self.u64()?;
        if len > MAX_STRING_BYTES {
            return Err(self.err(format!("string length {len} exceeds the limit of {MAX_STRING_BYTES}")));
        }
        let bytes = self.take(len as usize)?;
        // Vocabularies contain a few invalid sequences in the wild; keep them lossily.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
    fn value(&mut self, ty: u32, depth: u32) -> Result<Value, GgufError> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>()?[0]),
            1 => Value::I8(self.array::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.err(format!("boolean byte {b} is neither 0 nor 1"))),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.err(format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
                }
                let elem = self.u32()?;
                let min = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8..=12 => 8,
                    t => return Err(self.err(format!("unknown array element type {t}"))),
                };
                let n = self.count("array element", MAX_ARRAY_LEN, min)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(elem, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            t => return Err(self.err(format!("unknown metadata value type {t}"))),
        })
    }
}

impl GgufFile {
    /// Opens and validates a file.
    pub fn open(path: &Path) -> anyhow::Result<GgufFile> {
        let file =
            std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot open model {}: {e}", path.display()))?;
        // SAFETY: the map is read-only; zinc never writes model files while serving them.
        // A file truncated by someone else underneath us is outside what we can defend.
        let map =
            unsafe { Mmap::map(&file) }.map_err(|e| anyhow::anyhow!("cannot map model {}: {e}", path.display()))?;
        Ok(Self::parse(Arc::new(map), &path.display().to_string())?)
    }

    /// Validates a mapped file.
    pub fn parse(map: Arc<Mmap>, name: &str) -> Result<GgufFile, GgufError> {
        let buf: &[u8] = &map;
        let mut c = Cursor { buf, pos: 0, file: name };
        if c.take(4).map_err(|_| c.err("file is shorter than a GGUF header"))? != b"GGUF" {
            return Err(GgufError { file: name.into(), at: 0, what: "missing GGUF magic".into() });
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(c.err(format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        // Each tensor info takes at least 8 (name length) + 4 + 4 + 8 bytes.
        let n_tensors = c.count("tensor", MAX_TENSORS, 24)?;
        let n_kv = c.count("metadata", MAX_METADATA, 12)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let ty = c.u32()?;
            let v = c.value(ty, 0)?;
            if metadata.insert(key.clone(), v).is_some() {
                return Err(c.err(format!("metadata key {key} appears twice")));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
                _ => return Err(c.err(format!("general.alignment {v:?} is not a power of two ≤ {MAX_ALIGNMENT}"))),
            },
        };
        let mut raw = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(c.err(format!("tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64()?);
            }
            let ty = c.u32()?;
            let offset = c.u64()?;
            raw.push((name, dims, ty, offset, c.pos));
        }
        let file_name = c.file;
        let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
        let file_len = buf.len() as u64;
        let mut tensors = Vec::with_capacity(raw.len());
        let mut names = std::collections::HashSet::new();
        for (name, dims, ty, offset, at) in raw {
            let err = |what: String| GgufError { file: file_name.to_string(), at: at as u64, what };
            if !names.insert(name.clone()) {
                return Err(err(format!("tensor {name} appears twice")));
            }
            let dtype = GgmlType::try_from(ty).map_err(|e| err(format!("tensor {name} has an {e}")))?;
            let mut elements: u64 = 1;
            for &d in &dims {
                if d == 0 {
                    return Err(err(format!("tensor {name} has a zero dimension")));
                }
                elements = elements
                    .checked_mul(d)
                    .filter(|&e| e <= 1 << 40)
                    .ok_or_else(|| err(format!("tensor {name} dimensions {dims:?} are too large")))?;
            }
            if dims[0] % dtype.block_elements() as u64 != 0 {
                return Err(err(format!(
                    "tensor {name} row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    dtype,
                    dtype.block_elements()
                )));
            }
            let len = dtype.bytes_for(elements).ok_or_else(|| err(format!("tensor {name} size overflows")))?;
            if offset % alignment != 0 {
                return Err(err(format!("tensor {name} offset {offset} is not aligned to {alignment}")));
            }
            let start = data_start.checked_add(offset).filter(|s| *s <= file_len);
            let end = start.and_then(|s| s.checked_add(len)).filter(|e| *e <= file_len);
            let (Some(start), Some(_)) = (start, end) else {
                return Err(err(format!(
                    "tensor {name} ({len} bytes at data offset {offset}) extends past the end of the {file_len}-byte file"
                )));
            };
            tensors.push(TensorInfo {
                name,
                dims,
                dtype,
                file_offset: start as usize,
                len: len as usize,
                source: TensorSource::File,
            });
        }
        Ok(GgufFile { map, path: name.to_string(), version, metadata, tensors, assembled: Vec::new() })
    }

    /// The tensor's bytes, borrowed from the map.
    pub fn bytes(&self, t: &TensorInfo) -> &[u8] {
        match t.source {
            TensorSource::File => &self.map[t.file_offset..t.file_offset + t.len],
            TensorSource::Assembled(i) => &self.assembled[i][t.file_offset..t.file_offset + t.len],
        }
    }

    /// Adds a tensor whose bytes were assembled at load (they live as long as the file).
    pub fn add_assembled(&mut self, name: String, dims: Vec<u64>, dtype: GgmlType, bytes: Vec<u8>) {
        let len = bytes.len();
        let source = TensorSource::Assembled(self.assembled.len());
        self.assembled.push(bytes.into_boxed_slice());
        self.tensors.push(TensorInfo { name, dims, dtype, file_offset: 0, len, source });
    }

    /// The map, shared with whoever must keep the bytes alive (backends read them in place).
    pub fn map(&self) -> Arc<Mmap> {
        self.map.clone()
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// A required unsigned integer.
    pub fn get_u64(&self, key: &str) -> anyhow::Result<u64> {
        self.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| anyhow::anyhow!("{}: metadata {key} is missing or not an integer", self.path))
    }

    /// A required float.
    pub fn get_f64(&self, key: &str) -> anyhow::Result<f64> {
        self.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| anyhow::anyhow!("{}: metadata {key} is missing or not a number", self.path))
    }

    /// A required string.
    pub fn get_str(&self, key: &str) -> anyhow::Result<&str> {
        self.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow::anyhow!("{}: metadata {key} is missing or not a string", self.path))
    }
}
