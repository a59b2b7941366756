//! How much workgroup (shared) memory a kernel declares, read from its SPIR-V, so that a kernel
//! past the device's limit is named, with both sizes, when its pipeline is created, instead of
//! leaving the user with whatever the driver says (or does) with it. Vulkan guarantees 16 KiB.
//! It is a warning, not an error: a driver may run such a kernel correctly anyway (lavapipe,
//! which advertises 32 KiB, ran the 40 KiB norm kernel through every op test). The kernels that
//! devices without matrix units run and that declare more than 32 KiB have variants that fit
//! it, chosen at open where the device offers less (`rms_norm.lowmem`: 8 KiB;
//! `matmul_float_tiled.*.lowmem`: 32 KiB); the matrix-unit kernels declare up to 44 KiB.

// SPIR-V opcodes and the storage class read here (SPIR-V specification, section 3).
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_MATRIX: u32 = 24;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const STORAGE_WORKGROUP: u32 = 4;

/// Bytes of the module's Workgroup variables, their types packed without padding (a lower
/// bound of what a driver reserves). None when the words are not a module this reader
/// understands (a truncated instruction, a Workgroup variable of a type it does not size).
pub fn workgroup_bytes(code: &[u32]) -> Option<u64> {
    use std::collections::HashMap;
    let mut sizes: HashMap<u32, u64> = HashMap::new();
    let mut constants: HashMap<u32, u64> = HashMap::new();
    let mut pointees: HashMap<u32, u32> = HashMap::new();
    let mut total = 0u64;
    // Five header words, then instructions whose first word holds their length and opcode.
    let mut at = 5;
    while at < code.len() {
        let (len, op) = ((code[at] >> 16) as usize, code[at] & 0xffff);
        let ins = code.get(at..at + len).filter(|_| len > 0)?;
        let arg = |i: usize| ins.get(i).copied();
        let size = |id: Option<u32>| id.and_then(|id| sizes.get(&id).copied());
        // The byte size of the type this instruction declares, where it is one that is sized.
        let declared = match op {
            OP_TYPE_BOOL => Some(4),
            OP_TYPE_INT | OP_TYPE_FLOAT => arg(2).map(|bits| u64::from(bits) / 8),
            OP_TYPE_VECTOR | OP_TYPE_MATRIX => size(arg(2)).zip(arg(3)).map(|(s, n)| s * u64::from(n)),
            OP_TYPE_ARRAY => size(arg(2)).zip(arg(3).and_then(|c| constants.get(&c).copied())).map(|(s, n)| s * n),
            OP_TYPE_STRUCT => ins.get(2..).unwrap_or(&[]).iter().map(|&m| size(Some(m))).sum(),
            _ => None,
        };
        match op {
            _ if declared.is_some() => {
                sizes.insert(arg(1)?, declared?);
            }
            OP_TYPE_POINTER => {
                pointees.insert(arg(1)?, arg(3)?);
            }
            // Result type, result id, the value's low word (array lengths are 32-bit).
            OP_CONSTANT => {
                constants.insert(arg(2)?, u64::from(arg(3)?));
            }
            OP_VARIABLE if arg(3)? == STORAGE_WORKGROUP => {
                total += size(pointees.get(&arg(1)?).copied())?;
            }
            _ => {}
        }
        at += len;
    }
    Some(total)
}

/// Whether kernel `name` declares more workgroup memory than `limit` (a kernel this build
/// lacks declares none).
pub fn exceeds(id: crate::catalogue::KernelId, limit: u32) -> bool {
    crate::kernels::module_words(&id.name())
        .and_then(|w| workgroup_bytes(&w))
        .is_some_and(|bytes| bytes > u64::from(limit))
}

/// The warning for kernel `name`, declaring `bytes` of workgroup memory, on `device` whose
/// limit is `limit`; None when it fits.
pub fn beyond_limit(name: &str, bytes: u64, device: &str, limit: u32) -> Option<String> {
    (bytes > u64::from(limit)).then(|| {
        format!(
            "vulkan: warning: kernel {name} declares {bytes} bytes of workgroup memory and {device} offers \
             {limit}; if its results are wrong or the device fails, run this model on another device or \
             backend (`zinc probe` lists them)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{beyond_limit, workgroup_bytes};
    use crate::kernels::module_words;

    #[test]
    fn every_kernel_declares_a_size_this_reader_understands() {
        let mut largest = ("", 0);
        for (name, words) in crate::kernels::all_modules() {
            let bytes = workgroup_bytes(&words).unwrap_or_else(|| panic!("{name}: not read"));
            if bytes > largest.1 {
                largest = (name, bytes);
            }
        }
        // NVIDIA's drivers offer 48 KiB without opting in to more: every kernel must fit.
        assert!(largest.1 <= 48 * 1024, "{} declares {} bytes of workgroup memory", largest.0, largest.1);
        eprintln!("largest workgroup memory: {} bytes ({})", largest.1, largest.0);
    }

    #[test]
    fn sizes_are_those_the_shaders_declare() {
        let bytes = |name: &str| workgroup_bytes(&module_words(name).unwrap()).unwrap();
        // rms_norm.comp: float row_s[8192], float partial[1024], int block_sum[1024].
        assert_eq!(bytes("rms_norm"), (8192 + 1024 + 1024) * 4);
        // matmul_q8.comp with SHARED_X: uvec4 x_s[1024], vec2 ds_s[512], float squares_s[16]
        // (the row kernel's `red` is unused there and not in the module).
        assert_eq!(bytes("matmul_q8.q4_0.idot.sgx"), 1024 * 16 + 512 * 8 + 16 * 4);
        // The same without the staged row (LOW_MEM).
        assert_eq!(bytes("rms_norm.lowmem"), (1024 + 1024) * 4);
        // matmul_float_tiled.comp: two arrays of 4 × 32 × 33 floats, or × 32 without padding.
        assert_eq!(bytes("matmul_float_tiled.q6_k"), 2 * 4 * 32 * 33 * 4);
        assert_eq!(bytes("matmul_float_tiled.q6_k.lowmem"), 32 * 1024);
        // embed.comp declares none.
        assert_eq!(bytes("embed.q4_0"), 0);
    }

    #[test]
    fn a_kernel_past_the_device_limit_is_named_with_both_sizes() {
        assert!(beyond_limit("rms_norm", 40960, "a device", 40960).is_none());
        let w = beyond_limit("rms_norm", 40960, "a small device", 32768).unwrap();
        assert!(w.contains("rms_norm") && w.contains("40960") && w.contains("32768"));
        assert!(w.contains("a small device"), "{w}");
    }

    #[test]
    fn truncated_modules_are_not_read_past_their_end() {
        let words = module_words("rms_norm").unwrap();
        for cut in [6, words.len() / 2, words.len() - 1] {
            // Either the cut falls between instructions (a smaller total) or inside one (None).
            if let Some(b) = workgroup_bytes(&words[..cut]) {
                assert!(b <= (8192 + 1024 + 1024) * 4);
            }
        }
        assert_eq!(workgroup_bytes(&[]), Some(0));
    }
}
