//! Whether a device can run `matmul_coopmat.comp`: VK_KHR_cooperative_matrix with 16 × 16 × 16
//! half-precision fragments accumulating in float at subgroup scope, half-precision shader
//! arithmetic, and 32-wide subgroups (the kernel's four subgroups tile 64 × 64 outputs).

use ash::vk;

/// The extension's name, for device creation.
pub const EXTENSION: &std::ffi::CStr = c"VK_KHR_cooperative_matrix";

/// `Ok` when the device supports the kernel's configuration, else why not (shown in probe
/// features, so a user can see why prompt chunks take the integer path).
///
/// # Safety
/// `pd` must belong to `instance`.
pub unsafe fn support(entry: &ash::Entry, instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<(), String> {
    let exts = instance.enumerate_device_extension_properties(pd).map_err(|e| format!("listing extensions: {e}"))?;
    if !exts.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == EXTENSION)) {
        return Err("no VK_KHR_cooperative_matrix".into());
    }
    let mut cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut cm).push_next(&mut f12);
    instance.get_physical_device_features2(pd, &mut f2);
    if cm.cooperative_matrix != vk::TRUE || f12.shader_float16 != vk::TRUE {
        return Err("cooperative matrices or half-precision arithmetic not enabled by the driver".into());
    }
    let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p11);
    instance.get_physical_device_properties2(pd, &mut p2);
    if p11.subgroup_size != 32 {
        return Err(format!("subgroups of {} (the kernel is laid out for 32)", p11.subgroup_size));
    }
    let ext = ash::khr::cooperative_matrix::Instance::new(entry, instance);
    let shapes =
        ext.get_physical_device_cooperative_matrix_properties(pd).map_err(|e| format!("listing shapes: {e}"))?;
    let f16 = vk::ComponentTypeKHR::FLOAT16;
    let f32 = vk::ComponentTypeKHR::FLOAT32;
    let ok = shapes.iter().any(|s| {
        (s.m_size, s.n_size, s.k_size) == (16, 16, 16)
            && (s.a_type, s.b_type, s.c_type, s.result_type) == (f16, f16, f32, f32)
            && s.scope == vk::ScopeKHR::SUBGROUP
    });
    if !ok {
        return Err(format!("none of {} matrix shapes is 16×16×16 f16·f16→f32 per subgroup", shapes.len()));
    }
    Ok(())
}
