//! KFD topology: the GPU nodes listed under `/sys/devices/virtual/kfd/kfd/topology/nodes`.

use crate::os::Os;
use std::{collections::HashMap, path::Path};

/// Where KFD publishes its topology.
pub const TOPOLOGY_NODES: &str = "/sys/devices/virtual/kfd/kfd/topology/nodes";

/// One GPU node (CPU-only nodes, with `gpu_id` 0, are skipped).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuNode {
    /// The node's directory index.
    pub node: u32,
    /// KFD's id for the GPU, used in every ioctl.
    pub gpu_id: u32,
    /// `gfx_target_version` as KFD reports it (110000 = gfx1100).
    pub gfx_target_version: u32,
    /// Compute units (`simd_count / simd_per_cu`).
    pub compute_units: u32,
    /// Render node minor (`/dev/dri/renderD<minor>`).
    pub drm_render_minor: u32,
    /// Local memory in bytes (sum of the node's memory banks).
    pub local_memory_bytes: u64,
    /// Marketing name from the node's `name` file, when present.
    pub name: String,
}

impl GpuNode {
    /// The gfx target name, `gfx1100` for version 110000 (major, minor, stepping in hex).
    pub fn gfx_target(&self) -> String {
        let v = self.gfx_target_version;
        format!("gfx{}{:x}{:x}", v / 10000, (v / 100) % 100, v % 100)
    }
}

/// Parses a sysfs `properties` file: one `key value` pair per line.
pub fn parse_properties(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// Reads every GPU node. An unreadable node is skipped; a missing topology is an error.
pub fn gpu_nodes(os: &dyn Os) -> std::io::Result<Vec<GpuNode>> {
    let mut nodes = Vec::new();
    for dir in os.read_dir(Path::new(TOPOLOGY_NODES))? {
        let Some(index) = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()) else {
            continue;
        };
        let gpu_id =
            os.read_to_string(&dir.join("gpu_id")).ok().and_then(|s| s.trim().parse::<u32>().ok()).unwrap_or(0);
        if gpu_id == 0 {
            continue;
        }
        let Ok(props) = os.read_to_string(&dir.join("properties")) else { continue };
        let p = parse_properties(&props);
        let get = |k: &str| p.get(k).copied().unwrap_or(0);
        let simd_per_cu = get("simd_per_cu").max(1);
        let mut local_memory_bytes = 0;
        if let Ok(banks) = os.read_dir(&dir.join("mem_banks")) {
            for bank in banks {
                if let Ok(t) = os.read_to_string(&bank.join("properties")) {
                    local_memory_bytes += parse_properties(&t).get("size_in_bytes").copied().unwrap_or(0);
                }
            }
        }
        let name = os.read_to_string(&dir.join("name")).map(|s| s.trim().to_string()).unwrap_or_default();
        nodes.push(GpuNode {
            node: index,
            gpu_id,
            gfx_target_version: get("gfx_target_version") as u32,
            compute_units: (get("simd_count") / simd_per_cu) as u32,
            drm_render_minor: get("drm_render_minor") as u32,
            local_memory_bytes,
            name,
        });
    }
    nodes.sort_by_key(|n| n.node);
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_target_names_use_hex_minor_and_stepping() {
        let mut n = GpuNode {
            node: 1,
            gpu_id: 1,
            gfx_target_version: 110000,
            compute_units: 0,
            drm_render_minor: 128,
            local_memory_bytes: 0,
            name: String::new(),
        };
        assert_eq!(n.gfx_target(), "gfx1100");
        n.gfx_target_version = 90010;
        assert_eq!(n.gfx_target(), "gfx90a");
        n.gfx_target_version = 120001;
        assert_eq!(n.gfx_target(), "gfx1201");
    }

    #[test]
    fn properties_skip_malformed_lines() {
        let p = parse_properties("simd_count 96\nbogus\nname x\ngpu_id 7\n");
        assert_eq!(p.get("simd_count"), Some(&96));
        assert_eq!(p.get("gpu_id"), Some(&7));
        assert!(!p.contains_key("name"));
    }
}
