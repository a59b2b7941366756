//! amdhsa code objects: the ELF files clang's amdgcn target writes, read as hostile input and
//! loaded into executable device memory so an AQL dispatch can name a kernel descriptor.
//!
//! zinc bundles one tiny kernel (`kernels/write_value.cl`, built for each gfx11 and gfx12
//! target by `kernels/build.sh`, the objects committed in `kernels/bin/`). Loading copies the
//! `PT_LOAD` segments to one allocation at their virtual addresses; the kernel descriptor
//! finds its code by a relative offset, so no relocation is needed, and an object that asks
//! for relocations is refused rather than half-loaded.

use crate::driver::{Buffer, DriverResult, KfdDevice, HOST_VISIBLE};

const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
const ET_DYN: u16 = 3;
const PT_LOAD: u32 = 1;
const SHT_DYNSYM: u32 = 11;
const SHT_RELA: u32 = 4;
const SHT_REL: u32 = 9;
/// The largest image zinc loads; its kernels are tiny, and a size field beyond this is a
/// corrupt or hostile file, not a reason to allocate.
const MAX_IMAGE_BYTES: u64 = 16 << 20;
/// Bytes of a kernel descriptor (`amd_kernel_code_t`'s successor, `kernel_descriptor_t`).
pub const KERNEL_DESCRIPTOR_BYTES: u64 = 64;

/// `EF_AMDGPU_MACH_*` values (LLVM `ELF.h`) for the targets zinc bundles code for.
const MACHS: &[(u32, &str)] = &[
    (0x041, "gfx1100"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x044, "gfx1103"),
    (0x043, "gfx1150"),
    (0x04a, "gfx1151"),
    (0x055, "gfx1152"),
    (0x048, "gfx1200"),
    (0x04e, "gfx1201"),
];

/// The name of the bundled smoke kernel.
pub const WRITE_VALUE_KERNEL: &str = "zinc_write_value";

/// The bundled `zinc_write_value` code objects, by target.
const BUNDLED: &[(&str, &[u8])] = &[
    ("gfx1100", include_bytes!("../kernels/bin/write_value-gfx1100.hsaco")),
    ("gfx1101", include_bytes!("../kernels/bin/write_value-gfx1101.hsaco")),
    ("gfx1102", include_bytes!("../kernels/bin/write_value-gfx1102.hsaco")),
    ("gfx1103", include_bytes!("../kernels/bin/write_value-gfx1103.hsaco")),
    ("gfx1150", include_bytes!("../kernels/bin/write_value-gfx1150.hsaco")),
    ("gfx1151", include_bytes!("../kernels/bin/write_value-gfx1151.hsaco")),
    ("gfx1152", include_bytes!("../kernels/bin/write_value-gfx1152.hsaco")),
    ("gfx1200", include_bytes!("../kernels/bin/write_value-gfx1200.hsaco")),
    ("gfx1201", include_bytes!("../kernels/bin/write_value-gfx1201.hsaco")),
];

/// The bundled smoke kernel for `gfx` (such as `gfx1100`), if zinc carries one.
pub fn bundled_write_value(gfx: &str) -> Option<&'static [u8]> {
    BUNDLED.iter().find(|(t, _)| *t == gfx).map(|(_, b)| *b)
}

/// Every bundled target, for tests and messages.
pub fn bundled_targets() -> impl Iterator<Item = &'static str> {
    BUNDLED.iter().map(|(t, _)| *t)
}

/// One `PT_LOAD` segment: where its bytes come from and where they go.
#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: usize,
    file_size: usize,
    vaddr: u64,
}

/// A parsed code object, checked but not yet loaded.
#[derive(Debug)]
pub struct CodeObject<'a> {
    bytes: &'a [u8],
    /// The target the object was built for (`gfx1100`), from `e_flags`.
    pub target: &'static str,
    segments: Vec<Segment>,
    /// Bytes the loaded image spans (highest segment end).
    pub image_bytes: u64,
    symbols: Vec<(String, u64)>,
}

/// A kernel ready to dispatch: its descriptor's device address and the sizes the dispatch
/// packet needs.
#[derive(Debug, Clone, Copy)]
pub struct LoadedKernel {
    /// Device address of the kernel descriptor: the packet's `kernel_object`.
    pub descriptor: u64,
    /// `group_segment_fixed_size` (LDS bytes).
    pub group_segment_bytes: u32,
    /// `private_segment_fixed_size` (scratch bytes per work-item).
    pub private_segment_bytes: u32,
    /// `kernarg_size`.
    pub kernarg_bytes: u32,
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&self, at: u64, n: u64, what: &str) -> DriverResult<&[u8]> {
        let end = at.checked_add(n).filter(|&e| e <= self.0.len() as u64);
        match end {
            Some(end) => Ok(&self.0[at as usize..end as usize]),
            None => {
                Err(format!("code object: {what} at {at:#x}+{n} runs past the end of the {}-byte file", self.0.len()))
            }
        }
    }
    fn u16(&self, at: u64, what: &str) -> DriverResult<u16> {
        Ok(u16::from_le_bytes(self.bytes(at, 2, what)?.try_into().unwrap_or_default()))
    }
    fn u32(&self, at: u64, what: &str) -> DriverResult<u32> {
        Ok(u32::from_le_bytes(self.bytes(at, 4, what)?.try_into().unwrap_or_default()))
    }
    fn u64(&self, at: u64, what: &str) -> DriverResult<u64> {
        Ok(u64::from_le_bytes(self.bytes(at, 8, what)?.try_into().unwrap_or_default()))
    }
}

impl<'a> CodeObject<'a> {
    /// Checks the ELF header, segments, relocations and dynamic symbols of `bytes`.
    pub fn parse(bytes: &'a [u8]) -> DriverResult<CodeObject<'a>> {
        let r = Reader(bytes);
        let ident = r.bytes(0, 16, "ELF identification")?;
        if &ident[0..4] != b"\x7fELF" {
            return Err("code object: not an ELF file".into());
        }
        if ident[4] != 2 || ident[5] != 1 {
            return Err("code object: not a 64-bit little-endian ELF file".into());
        }
        if ident[7] != ELFOSABI_AMDGPU_HSA {
            return Err(format!("code object: OS ABI {} is not AMDGPU HSA ({ELFOSABI_AMDGPU_HSA})", ident[7]));
        }
        let machine = r.u16(18, "e_machine")?;
        if machine != EM_AMDGPU {
            return Err(format!("code object: machine {machine} is not AMDGPU ({EM_AMDGPU})"));
        }
        if r.u16(16, "e_type")? != ET_DYN {
            return Err("code object: not a shared object (link it with ld.lld -shared)".into());
        }
        let flags = r.u32(48, "e_flags")?;
        let mach = flags & 0xff;
        let target =
            MACHS.iter().find(|(m, _)| *m == mach).map(|(_, t)| *t).ok_or_else(|| {
                format!("code object: target mach {mach:#x} is not a gfx11 or gfx12 target zinc knows")
            })?;
        let segments = Self::segments(&r)?;
        let image_bytes = segments.iter().map(|s| s.1).max().unwrap_or(0);
        let segments = segments.into_iter().map(|s| s.0).collect();
        let symbols = Self::dynamic_symbols(&r)?;
        Ok(CodeObject { bytes, target, segments, image_bytes, symbols })
    }

    /// The `PT_LOAD` segments and the image end each one reaches.
    fn segments(r: &Reader) -> DriverResult<Vec<(Segment, u64)>> {
        let phoff = r.u64(32, "e_phoff")?;
        let phentsize = r.u16(54, "e_phentsize")? as u64;
        let phnum = r.u16(56, "e_phnum")? as u64;
        if phentsize != 56 {
            return Err(format!("code object: program header entries of {phentsize} bytes, not 56"));
        }
        let mut out = Vec::new();
        for i in 0..phnum {
            let at = phoff.saturating_add(i * phentsize);
            r.bytes(at, phentsize, "program header")?;
            if r.u32(at, "p_type")? != PT_LOAD {
                continue;
            }
            let offset = r.u64(at + 8, "p_offset")?;
            let vaddr = r.u64(at + 16, "p_vaddr")?;
            let filesz = r.u64(at + 32, "p_filesz")?;
            let memsz = r.u64(at + 40, "p_memsz")?;
            r.bytes(offset, filesz, "segment contents")?;
            let end =
                vaddr.checked_add(memsz).filter(|&e| e <= MAX_IMAGE_BYTES && filesz <= memsz).ok_or_else(|| {
                    format!("code object: segment at {vaddr:#x} of {memsz} bytes (file {filesz}) is out of bounds")
                })?;
            out.push((Segment { file_offset: offset as usize, file_size: filesz as usize, vaddr }, end));
        }
        if out.is_empty() {
            return Err("code object: no loadable segment".into());
        }
        Ok(out)
    }

    /// Names and values from `.dynsym`; refuses objects with relocation sections that have
    /// entries.
    fn dynamic_symbols(r: &Reader) -> DriverResult<Vec<(String, u64)>> {
        let shoff = r.u64(40, "e_shoff")?;
        let shentsize = r.u16(58, "e_shentsize")? as u64;
        let shnum = r.u16(60, "e_shnum")? as u64;
        if shentsize != 64 {
            return Err(format!("code object: section header entries of {shentsize} bytes, not 64"));
        }
        let section = |i: u64| -> DriverResult<(u32, u64, u64, u32)> {
            let at = shoff.saturating_add(i * shentsize);
            r.bytes(at, shentsize, "section header")?;
            Ok((
                r.u32(at + 4, "sh_type")?,
                r.u64(at + 24, "sh_offset")?,
                r.u64(at + 32, "sh_size")?,
                r.u32(at + 40, "sh_link")?,
            ))
        };
        let mut symbols = Vec::new();
        for i in 0..shnum {
            let (ty, offset, size, link) = section(i)?;
            if (ty == SHT_RELA || ty == SHT_REL) && size > 0 {
                return Err(
                    "code object: has relocations; zinc loads only position-independent objects without them".into()
                );
            }
            if ty != SHT_DYNSYM {
                continue;
            }
            if link as u64 >= shnum {
                return Err(format!("code object: .dynsym links to section {link} of {shnum}"));
            }
            let (_, str_off, str_size, _) = section(link as u64)?;
            let strtab = r.bytes(str_off, str_size, "dynamic string table")?;
            let table = r.bytes(offset, size, "dynamic symbol table")?;
            for sym in table.chunks_exact(24) {
                let name_at = u32::from_le_bytes(sym[0..4].try_into().unwrap_or_default()) as usize;
                let value = u64::from_le_bytes(sym[8..16].try_into().unwrap_or_default());
                let name = strtab.get(name_at..).and_then(|s| s.split(|&b| b == 0).next()).unwrap_or_default();
                if !name.is_empty() {
                    symbols.push((String::from_utf8_lossy(name).into_owned(), value));
                }
            }
        }
        Ok(symbols)
    }

    /// The image offset of `kernel`'s descriptor (`<kernel>.kd`), checked to lie inside the
    /// image and be 64-byte aligned.
    pub fn descriptor_offset(&self, kernel: &str) -> DriverResult<u64> {
        let kd = format!("{kernel}.kd");
        let value = self
            .symbols
            .iter()
            .find(|(n, _)| *n == kd)
            .map(|s| s.1)
            .ok_or_else(|| format!("code object for {}: no symbol {kd}", self.target))?;
        if value % 64 != 0 || value.saturating_add(KERNEL_DESCRIPTOR_BYTES) > self.image_bytes {
            return Err(format!("code object: {kd} at {value:#x} is misaligned or outside the image"));
        }
        Ok(value)
    }

    /// The loaded image as bytes: segments at their virtual addresses, the rest zero.
    pub fn image(&self) -> Vec<u8> {
        let mut image = vec![0u8; self.image_bytes as usize];
        for s in &self.segments {
            let dst = s.vaddr as usize;
            image[dst..dst + s.file_size].copy_from_slice(&self.bytes[s.file_offset..s.file_offset + s.file_size]);
        }
        image
    }

    /// Reads a kernel descriptor's sizes out of a built image.
    pub fn kernel_at(image: &[u8], descriptor_offset: u64, base: u64) -> LoadedKernel {
        let kd = &image[descriptor_offset as usize..(descriptor_offset + KERNEL_DESCRIPTOR_BYTES) as usize];
        let word = |i: usize| u32::from_le_bytes(kd[i..i + 4].try_into().unwrap_or_default());
        LoadedKernel {
            descriptor: base + descriptor_offset,
            group_segment_bytes: word(0),
            private_segment_bytes: word(4),
            kernarg_bytes: word(8),
        }
    }

    /// Copies the image into a fresh executable allocation and returns it with `kernel`.
    pub fn load(&self, dev: &KfdDevice, kernel: &str) -> DriverResult<(Buffer, LoadedKernel)> {
        let kd = self.descriptor_offset(kernel)?;
        let image = self.image();
        let code = dev.alloc(self.image_bytes, HOST_VISIBLE)?;
        // SAFETY: `code` is a fresh host-visible allocation of at least `image.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), code.va as *mut u8, image.len()) };
        Ok((code, Self::kernel_at(&image, kd, code.va)))
    }
}

/// A one-dimensional dispatch of a loaded kernel, with the segment sizes its descriptor asks
/// for (the packet processor reserves LDS and scratch from these).
pub fn dispatch_kernel(k: &LoadedKernel, kernarg: u64, grid: u32, workgroup: u16, completion: u64) -> [u8; 64] {
    use std::mem::offset_of;
    use zinc_amd_sys::aql::KernelDispatchPacket as P;
    let mut p = crate::driver::dispatch(k.descriptor, kernarg, grid, workgroup, completion);
    let private = offset_of!(P, private_segment_size);
    let group = offset_of!(P, group_segment_size);
    p[private..private + 4].copy_from_slice(&k.private_segment_bytes.to_le_bytes());
    p[group..group + 4].copy_from_slice(&k.group_segment_bytes.to_le_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_object_is_for_the_target_it_is_filed_under() {
        for target in bundled_targets() {
            let obj = CodeObject::parse(bundled_write_value(target).unwrap()).unwrap();
            assert_eq!(obj.target, target);
            let kd = obj.descriptor_offset(WRITE_VALUE_KERNEL).unwrap();
            let k = CodeObject::kernel_at(&obj.image(), kd, 0x1000);
            assert_eq!(k.descriptor, 0x1000 + kd);
            assert_eq!(k.kernarg_bytes, 16, "{target}: dst pointer and value");
            assert_eq!(k.private_segment_bytes, 0, "{target}: the kernel needs no scratch");
            // The descriptor points at code inside the image.
            let img = obj.image();
            let entry = i64::from_le_bytes(img[kd as usize + 16..kd as usize + 24].try_into().unwrap());
            let code = kd as i64 + entry;
            assert!(code > 0 && (code as u64) < obj.image_bytes && code % 256 == 0, "{target}: entry {code:#x}");
            assert!(img[code as usize..code as usize + 16].iter().any(|&b| b != 0), "{target}: code bytes present");
        }
    }

    #[test]
    fn corrupt_objects_are_refused_with_the_reason() {
        let good = bundled_write_value("gfx1100").unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..10].to_vec(), "past the end"),
            (b"not an elf at all, just text".to_vec(), "not an ELF"),
            (
                {
                    let mut b = good.to_vec();
                    b[18] = 62;
                    b
                },
                "machine 62",
            ),
            (
                {
                    let mut b = good.to_vec();
                    b[7] = 0;
                    b
                },
                "OS ABI",
            ),
            (
                {
                    let mut b = good.to_vec();
                    b[48] = 0x2f;
                    b
                },
                "mach 0x2f",
            ),
            // e_phoff far past the end.
            (
                {
                    let mut b = good.to_vec();
                    b[32..40].copy_from_slice(&u64::MAX.to_le_bytes()[..]);
                    b
                },
                "past the end",
            ),
            (good[..good.len() - 200].to_vec(), "past the end"),
        ];
        for (bytes, want) in cases {
            let err = CodeObject::parse(&bytes).map(|o| o.target).unwrap_err();
            assert!(err.contains(want), "want {want:?} in {err:?}");
        }
    }

    #[test]
    fn a_missing_kernel_is_named() {
        let obj = CodeObject::parse(bundled_write_value("gfx1201").unwrap()).unwrap();
        let err = obj.descriptor_offset("no_such_kernel").unwrap_err();
        assert!(err.contains("no_such_kernel.kd") && err.contains("gfx1201"), "{err}");
    }

    #[test]
    fn a_huge_segment_is_refused_before_any_allocation() {
        let mut b = bundled_write_value("gfx1100").unwrap().to_vec();
        let phoff = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
        // Find the first PT_LOAD and make its memory size enormous.
        let mut i = phoff;
        while u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) != PT_LOAD {
            i += 56;
        }
        b[i + 40..i + 48].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let err = CodeObject::parse(&b).unwrap_err();
        assert!(err.contains("out of bounds"), "{err}");
    }
}
