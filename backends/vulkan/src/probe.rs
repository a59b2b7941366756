//! Physical devices as the Vulkan loader reports them.

use ash::vk;
use std::ffi::CStr;
use zinc_plugin_api::{DeviceInfo, DeviceKind, ProbeReport};

/// One physical device with its score.
#[derive(Debug, Clone)]
pub struct VulkanDevice {
    /// Index in the loader's enumeration.
    pub index: usize,
    /// Description for reports.
    pub info: DeviceInfo,
    /// Ranking score (see [`ProbeReport::score`]).
    pub score: u32,
}

fn kind_and_score(t: vk::PhysicalDeviceType) -> (DeviceKind, u32) {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => (DeviceKind::DiscreteGpu, 800),
        vk::PhysicalDeviceType::INTEGRATED_GPU => (DeviceKind::IntegratedGpu, 500),
        vk::PhysicalDeviceType::VIRTUAL_GPU => (DeviceKind::VirtualGpu, 400),
        // lavapipe and SwiftShader report CPU: software, below the CPU tier (100).
        vk::PhysicalDeviceType::CPU => (DeviceKind::SoftwareGpu, 50),
        _ => (DeviceKind::Other, 200),
    }
}

fn cstr(s: Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    s.map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

pub(crate) unsafe fn describe(instance: &ash::Instance, index: usize, pd: vk::PhysicalDevice) -> VulkanDevice {
    let props = instance.get_physical_device_properties(pd);
    let api = props.api_version;
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
    if api >= vk::API_VERSION_1_2 {
        props2 = props2.push_next(&mut driver);
    }
    instance.get_physical_device_properties2(pd, &mut props2);
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features2 = vk::PhysicalDeviceFeatures2::default();
    if api >= vk::API_VERSION_1_2 {
        features2 = features2.push_next(&mut f11).push_next(&mut f12);
    }
    instance.get_physical_device_features2(pd, &mut features2);
    let mem = instance.get_physical_device_memory_properties(pd);
    let device_local: u64 = mem.memory_heaps[..mem.memory_heap_count as usize]
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .sum();
    let extensions: Vec<String> = instance
        .enumerate_device_extension_properties(pd)
        .unwrap_or_default()
        .iter()
        .map(|e| cstr(e.extension_name_as_c_str()))
        .collect();
    let has = |name: &str| extensions.iter().any(|e| e == name);

    let mut features = vec![
        format!("vulkan={}.{}.{}", vk::api_version_major(api), vk::api_version_minor(api), vk::api_version_patch(api)),
        format!("subgroup={}", subgroup.subgroup_size),
    ];
    let flags = [
        ("storage16", f11.storage_buffer16_bit_access),
        ("storage8", f12.storage_buffer8_bit_access),
        ("float16", f12.shader_float16),
        ("int8", f12.shader_int8),
    ];
    features.extend(flags.iter().filter(|(_, on)| *on == vk::TRUE).map(|(n, _)| n.to_string()));
    for (ext, label) in [
        ("VK_KHR_shader_integer_dot_product", "integer-dot"),
        ("VK_KHR_cooperative_matrix", "coopmat"),
        ("VK_NV_cooperative_matrix2", "coopmat2"),
    ] {
        if has(ext) {
            features.push(label.to_string());
        }
    }
    let driver_text = if api >= vk::API_VERSION_1_2 {
        format!("{} {}", cstr(driver.driver_name_as_c_str()), cstr(driver.driver_info_as_c_str()))
    } else {
        format!("driver version {:#x}", props.driver_version)
    };
    let (kind, score) = kind_and_score(props.device_type);
    VulkanDevice {
        index,
        info: DeviceInfo::new(
            cstr(props.device_name_as_c_str()),
            format!("{:#06x}", props.vendor_id),
            driver_text.trim().to_string(),
            kind,
            device_local,
            features,
        ),
        score,
    }
}

/// The Vulkan loader, loaded once and never unloaded, with one instance that is never
/// destroyed either. NVIDIA's driver cannot be found again in a process that unloaded it, and
/// the loader unloads a driver when its last instance is destroyed: without the kept instance,
/// a process that opens and closes the backend a few times in a row (a test suite, one probe
/// after another) got "Unable to find a Vulkan driver", and two threads closing and opening at
/// once crashed in the driver.
pub(crate) fn loader() -> Result<&'static ash::Entry, String> {
    static ENTRY: std::sync::OnceLock<Result<ash::Entry, String>> = std::sync::OnceLock::new();
    ENTRY
        .get_or_init(|| {
            // SAFETY: loading the system's Vulkan loader; ash checks the entry points it resolves.
            let entry = unsafe { ash::Entry::load() }.map_err(|e| e.to_string())?;
            let app = vk::ApplicationInfo::default().application_name(c"zinc").api_version(vk::API_VERSION_1_2);
            // SAFETY: the create info lives across the call. The instance is deliberately never
            // destroyed (see above; ash's handle has no Drop, so dropping it destroys nothing);
            // where none can be made, the probe says why.
            let _kept =
                unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None) };
            Ok(entry)
        })
        .as_ref()
        .map_err(|e| e.clone())
}

/// Enumerates devices; returns the report and the best device.
pub fn probe_vulkan() -> (ProbeReport, Option<VulkanDevice>) {
    let (report, best, _) = probe_all();
    (report, best)
}

/// Enumerates devices; returns the report, the best device and every device.
pub(crate) fn probe_all() -> (ProbeReport, Option<VulkanDevice>, Vec<VulkanDevice>) {
    let entry = match loader() {
        Ok(e) => e,
        Err(e) => {
            return (
                ProbeReport::unavailable(format!(
                    "Vulkan loader not found ({e}): install libvulkan1 and a driver (mesa-vulkan-drivers for lavapipe)"
                )),
                None,
                Vec::new(),
            )
        }
    };
    let app = vk::ApplicationInfo::default().application_name(c"zinc").api_version(vk::API_VERSION_1_2);
    let create = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: the create info and everything it points to live across the call.
    let instance = match unsafe { entry.create_instance(&create, None) } {
        Ok(i) => i,
        Err(e) => {
            return (
                ProbeReport::unavailable(format!(
                    "Vulkan loader present but no instance ({e}): no Vulkan driver (ICD) is installed"
                )),
                None,
                Vec::new(),
            )
        }
    };
    // SAFETY: the instance is valid until destroyed below; physical devices belong to it.
    let devices: Vec<VulkanDevice> = unsafe {
        let pds = instance.enumerate_physical_devices().unwrap_or_default();
        let d = pds.iter().enumerate().map(|(i, &pd)| describe(&instance, i, pd)).collect();
        instance.destroy_instance(None);
        d
    };
    let Some(best) = devices.iter().max_by_key(|d| (d.score, std::cmp::Reverse(d.index))).cloned() else {
        return (ProbeReport::unavailable("Vulkan driver present but it lists no physical device"), None, devices);
    };
    let mut report = ProbeReport::available(best.score, devices.iter().map(|d| d.info.clone()).collect())
        .with_detail("chosen device", best.info.name.to_string());
    if best.info.kind == DeviceKind::SoftwareGpu {
        report = report.with_reason("software implementation only (runs on the CPU): ranks below the CPU tier");
    }
    (report, Some(best), devices)
}
