//! What `/dev/kfd` and the KFD topology say about the node.

use std::path::Path;
use zinc_amd_sys::{
    ioctl::{self, KfdGetVersion},
    topology::gpu_nodes,
    Os,
};
use zinc_plugin_api::{DeviceInfo, DeviceKind, ProbeReport};

/// Score while the driver is proven only on an emulated device: below every hardware Vulkan
/// device (integrated 500, discrete 800), so that an AMD APU does not run ioctls never tried
/// on hardware when its Vulkan driver works; above the CPU tier (100). Raise it once the
/// driver has run on hardware.
pub const KFD_SCORE: u32 = 400;
/// The oldest KFD interface whose queue and memory ioctls the driver uses (RUNTIME_ENABLE).
pub const MIN_KFD_MINOR: u32 = 14;

/// Probes `/dev/kfd`: presence and permissions, interface version, GPU topology nodes.
pub fn probe_kfd(os: &dyn Os) -> ProbeReport {
    let fd = match os.open_rw(Path::new("/dev/kfd")) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ProbeReport::unavailable("/dev/kfd not present (no amdgpu kernel driver with KFD)")
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return ProbeReport::unavailable(
                "/dev/kfd exists but cannot be opened read-write: add this user to the `render` group",
            )
        }
        Err(e) => return ProbeReport::unavailable(format!("/dev/kfd cannot be opened: {e}")),
    };
    let mut v = KfdGetVersion::default();
    let version = os.ioctl(fd, ioctl::KFD_IOC_GET_VERSION, ioctl::as_bytes_mut(&mut v));
    os.close(fd);
    if let Err(e) = version {
        return ProbeReport::unavailable(format!("KFD GET_VERSION failed: {e}"));
    }
    let version_text = format!("{}.{}", v.major, v.minor);
    if v.major != 1 || v.minor < MIN_KFD_MINOR {
        return ProbeReport::unavailable(format!(
            "KFD interface {version_text} is too old: zinc needs 1.{MIN_KFD_MINOR} or newer (update the kernel)"
        ))
        .with_detail("kfd interface", version_text);
    }
    let nodes = match gpu_nodes(os) {
        Ok(n) => n,
        Err(e) => {
            return ProbeReport::unavailable(format!("KFD topology unreadable: {e}"))
                .with_detail("kfd interface", version_text)
        }
    };
    if nodes.is_empty() {
        return ProbeReport::unavailable("KFD lists no GPU nodes").with_detail("kfd interface", version_text);
    }
    let kind = if os.is_emulated() { DeviceKind::Emulated } else { DeviceKind::DiscreteGpu };
    let devices = nodes
        .iter()
        .map(|n| {
            let name = if n.name.is_empty() { n.gfx_target() } else { format!("{} ({})", n.name, n.gfx_target()) };
            DeviceInfo::new(
                name,
                "AMD",
                format!("kfd {version_text}"),
                kind,
                n.local_memory_bytes,
                vec![
                    n.gfx_target(),
                    format!("compute-units={}", n.compute_units),
                    format!("gpu-id={}", n.gpu_id),
                    format!("render-node=renderD{}", n.drm_render_minor),
                ],
            )
        })
        .collect();
    ProbeReport::available(KFD_SCORE, devices)
        .with_reason("experimental: proven on an emulated device only")
        .with_detail("kfd interface", version_text)
        .with_detail("os", os.describe())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zinc_amd_sys::fake::FakeNode;

    fn node(text: &str) -> FakeNode {
        FakeNode::from_toml(text, "test").unwrap()
    }

    const GPU: &str =
        "[[gpus]]\ngpu_id = 9\ngfx_target_version = 120001\ndrm_render_minor = 128\nmemory_bytes = 4096\n";

    #[test]
    fn a_node_with_kfd_and_a_gpu_is_available() {
        let r = probe_kfd(&node(&format!("[kfd]\n{GPU}")));
        assert!(r.available, "{}", r.reason);
        assert_eq!(r.devices.len(), 1);
        assert_eq!(r.devices[0].kind, DeviceKind::Emulated);
        assert!(r.devices[0].name.contains("gfx1201"), "{}", r.devices[0].name);
        assert_eq!(r.score, KFD_SCORE);
    }

    #[test]
    fn missing_and_inaccessible_kfd_give_distinct_reasons() {
        let missing = probe_kfd(&node(GPU));
        assert!(!missing.available && missing.reason.contains("not present"), "{}", missing.reason);
        let denied = probe_kfd(&node(&format!("[kfd]\naccessible = false\n{GPU}")));
        assert!(!denied.available && denied.reason.contains("render"), "{}", denied.reason);
    }

    #[test]
    fn an_old_interface_is_refused_with_both_versions() {
        let r = probe_kfd(&node(&format!("[kfd]\nversion = [1, 11]\n{GPU}")));
        assert!(!r.available);
        assert!(r.reason.contains("1.11") && r.reason.contains("1.14"), "{}", r.reason);
    }

    #[test]
    fn kfd_without_gpu_nodes_is_unavailable() {
        let r = probe_kfd(&node("[kfd]\n"));
        assert!(!r.available && r.reason.contains("no GPU"), "{}", r.reason);
    }
}
