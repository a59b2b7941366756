//! Whether the node's amdgpu driver offers compute user-mode queues.
//!
//! Support is known only by asking: DEV_INFO's `userq_ip_mask` must have the compute bit,
//! HW_IP_INFO for compute must report user-queue slots, and UQ_FW_AREAS must succeed. Every
//! answer buffer starts zeroed, so an older kernel that copies back less reads as "no".

use std::path::{Path, PathBuf};
use zinc_amd_sys::{
    drm::{self, DrmAmdgpuInfo},
    ioctl::{as_bytes_mut, read_u32},
    Os,
};
use zinc_plugin_api::{DeviceInfo, DeviceKind, ProbeReport};

/// Score while proven on an emulated device only (see the kfd backend's score).
pub const USERQ_SCORE: u32 = 450;
/// The reason every node without compute user queues reports, so logs and tests can match it.
pub const SLOTS_MISSING: &str = "compute user-queue slots missing";

/// One AMDGPU_INFO query into a zeroed answer buffer.
pub(crate) fn info(os: &dyn Os, fd: i32, query: u32, ip_type: u32, answer: &mut [u8]) -> std::io::Result<()> {
    let mut req = DrmAmdgpuInfo {
        return_pointer: answer.as_mut_ptr() as u64,
        return_size: answer.len() as u32,
        query,
        args: [ip_type, 0, 0, 0],
    };
    os.ioctl(fd, drm::DRM_IOCTL_AMDGPU_INFO, as_bytes_mut(&mut req))
}

/// What one render node answered.
enum NodeAnswer {
    Ready { slots: u32 },
    Missing(String),
}

fn query_node(os: &dyn Os, fd: i32) -> NodeAnswer {
    let mut dev = vec![0u8; drm::DEV_INFO_QUERY_SIZE];
    if let Err(e) = info(os, fd, drm::AMDGPU_INFO_DEV_INFO, 0, &mut dev) {
        return NodeAnswer::Missing(format!("DEV_INFO query failed ({e})"));
    }
    let mask = read_u32(&dev, drm::DEV_INFO_USERQ_IP_MASK_OFFSET);
    if mask & (1 << drm::AMDGPU_HW_IP_COMPUTE) == 0 {
        return NodeAnswer::Missing(format!("userq_ip_mask {mask:#x} has no compute bit"));
    }
    let mut hw = vec![0u8; drm::HW_IP_QUERY_SIZE];
    if let Err(e) = info(os, fd, drm::AMDGPU_INFO_HW_IP_INFO, drm::AMDGPU_HW_IP_COMPUTE, &mut hw) {
        return NodeAnswer::Missing(format!("HW_IP_INFO query failed ({e})"));
    }
    let slots = read_u32(&hw, drm::HW_IP_USERQ_NUM_SLOTS_OFFSET);
    if slots == 0 {
        return NodeAnswer::Missing("the compute IP reports 0 user-queue slots".into());
    }
    let mut fw = vec![0u8; drm::UQ_FW_AREAS_QUERY_SIZE];
    if let Err(e) = info(os, fd, drm::AMDGPU_INFO_UQ_FW_AREAS, drm::AMDGPU_HW_IP_COMPUTE, &mut fw) {
        return NodeAnswer::Missing(format!("UQ_FW_AREAS query failed ({e})"));
    }
    NodeAnswer::Ready { slots }
}

fn render_nodes(os: &dyn Os) -> Vec<PathBuf> {
    os.read_dir(Path::new("/dev/dri"))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("renderD")))
        .collect()
}

/// Probes every render node for compute user-queue support.
pub fn probe_userq(os: &dyn Os) -> ProbeReport {
    let nodes = render_nodes(os);
    if nodes.is_empty() {
        return ProbeReport::unavailable(format!("{SLOTS_MISSING}: no DRM render node in /dev/dri"));
    }
    let module_param = os
        .read_to_string(Path::new("/sys/module/amdgpu/parameters/user_queue"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    let mut devices = Vec::new();
    let mut why_not = Vec::new();
    for path in nodes {
        let name = path.display().to_string();
        let fd = match os.open_rw(&path) {
            Ok(fd) => fd,
            Err(e) => {
                why_not.push(format!("{name}: cannot open ({e})"));
                continue;
            }
        };
        let answer = query_node(os, fd);
        os.close(fd);
        match answer {
            NodeAnswer::Ready { slots } => {
                let kind = if os.is_emulated() { DeviceKind::Emulated } else { DeviceKind::DiscreteGpu };
                devices.push(DeviceInfo::new(
                    name,
                    "AMD",
                    "amdgpu userq",
                    kind,
                    0,
                    vec![format!("compute-userq-slots={slots}")],
                ));
            }
            NodeAnswer::Missing(why) => why_not.push(format!("{name}: {why}")),
        }
    }
    let report = if devices.is_empty() {
        ProbeReport::unavailable(format!("{SLOTS_MISSING} ({})", why_not.join("; ")))
    } else {
        ProbeReport::available(USERQ_SCORE, devices).with_reason("experimental: proven on an emulated device only")
    };
    report.with_detail("amdgpu user_queue parameter", module_param).with_detail("os", os.describe())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zinc_amd_sys::fake::FakeNode;

    fn probe(drm: &str) -> ProbeReport {
        let text =
            format!("[kfd]\n[[gpus]]\ngpu_id = 1\ngfx_target_version = 110000\ndrm_render_minor = 128\n[drm]\n{drm}");
        probe_userq(&FakeNode::from_toml(&text, "test").unwrap())
    }

    #[test]
    fn compute_slots_and_firmware_areas_make_userq_available() {
        let r = probe("userq_ip_mask = 2\nuserq_compute_slots = 8\nuq_fw_areas = true\n");
        assert!(r.available, "{}", r.reason);
        assert!(r.devices[0].features.iter().any(|f| f.as_str() == "compute-userq-slots=8"));
    }

    #[test]
    fn zero_slots_falls_back_with_the_documented_reason() {
        let r = probe("userq_ip_mask = 2\nuserq_compute_slots = 0\nuq_fw_areas = true\n");
        assert!(!r.available);
        assert!(r.reason.starts_with(SLOTS_MISSING) && r.reason.contains("0 user-queue slots"), "{}", r.reason);
    }

    #[test]
    fn eopnotsupp_and_einval_answers_fall_back() {
        for errno in [libc::EOPNOTSUPP, libc::EINVAL] {
            let r = probe(&format!("info_errno = {errno}\n"));
            assert!(!r.available && r.reason.starts_with(SLOTS_MISSING), "{}", r.reason);
            assert!(r.reason.contains("DEV_INFO"), "{}", r.reason);
        }
    }

    #[test]
    fn missing_compute_bit_or_firmware_areas_fall_back() {
        let r = probe("userq_ip_mask = 1\nuserq_compute_slots = 8\nuq_fw_areas = true\n");
        assert!(!r.available && r.reason.contains("no compute bit"), "{}", r.reason);
        let r = probe("userq_ip_mask = 2\nuserq_compute_slots = 8\nuq_fw_areas = false\n");
        assert!(!r.available && r.reason.contains("UQ_FW_AREAS"), "{}", r.reason);
    }

    #[test]
    fn a_node_without_render_nodes_says_so() {
        let r = probe_userq(&FakeNode::from_toml("", "empty").unwrap());
        assert!(!r.available && r.reason.contains("no DRM render node"), "{}", r.reason);
    }
}
