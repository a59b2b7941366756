//! What the host processor offers: instruction sets, cores, memory.

use zinc_plugin_api::{DeviceInfo, DeviceKind, ProbeReport};

/// The CPU tier's score: above software GPUs, below every real GPU.
pub const CPU_SCORE: u32 = 100;

/// Instruction-set extensions the kernels can use, detected at run time.
pub fn instruction_sets() -> Vec<String> {
    let mut f = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! detect {
            ($($name:tt),*) => {
                $(if std::arch::is_x86_feature_detected!($name) { f.push($name.to_string()); })*
            };
        }
        detect!("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni", "avxvnni");
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            f.push("neon".to_string());
        }
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            f.push("dotprod".to_string());
        }
    }
    f
}

fn meminfo_total_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The host processor as a device.
pub fn cpu_device() -> DeviceInfo {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut features = instruction_sets();
    features.push(format!("threads={cores}"));
    DeviceInfo::new(
        cpu_model_name(),
        std::env::consts::ARCH,
        "zinc cpu tier",
        DeviceKind::Cpu,
        meminfo_total_bytes(),
        features,
    )
}

/// The CPU tier is always available.
pub fn probe_cpu() -> ProbeReport {
    ProbeReport::available(CPU_SCORE, vec![cpu_device()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_probe_reports_threads_and_memory() {
        let r = probe_cpu();
        assert!(r.available);
        let d = &r.devices[0];
        assert_eq!(d.kind, DeviceKind::Cpu);
        assert!(d.memory_bytes > 0, "MemTotal should be readable on Linux");
        assert!(d.features.iter().any(|f| f.starts_with("threads=")));
        #[cfg(target_arch = "x86_64")]
        assert_eq!(d.features.iter().any(|f| f.as_str() == "avx2"), std::arch::is_x86_feature_detected!("avx2"));
    }
}
