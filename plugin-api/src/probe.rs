//! What a plugin reports about the node before anything is opened.

use abi_stable::{
    std_types::{RString, RVec},
    StableAbi,
};

/// The class of device, which decides most of the ranking.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// The host processor.
    Cpu,
    /// A GPU with its own memory.
    DiscreteGpu,
    /// A GPU sharing system memory.
    IntegratedGpu,
    /// A GPU passed through a hypervisor.
    VirtualGpu,
    /// A GPU API implemented in software on the CPU (lavapipe, llvmpipe, SwiftShader).
    SoftwareGpu,
    /// A device emulated for tests (the kfd and userq packet-processor emulator).
    Emulated,
    /// Anything else the driver reports.
    Other,
}

impl DeviceKind {
    /// A short lowercase label for tables and JSON.
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::DiscreteGpu => "discrete-gpu",
            DeviceKind::IntegratedGpu => "integrated-gpu",
            DeviceKind::VirtualGpu => "virtual-gpu",
            DeviceKind::SoftwareGpu => "software",
            DeviceKind::Emulated => "emulated",
            DeviceKind::Other => "other",
        }
    }
}

/// One device as its driver describes it (queried from the device, never from configuration).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// The device's own name, for example `NVIDIA H200` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: RString,
    /// Vendor name or PCI vendor id.
    pub vendor: RString,
    /// Driver name and version as the driver reports them.
    pub driver: RString,
    /// Device class.
    pub kind: DeviceKind,
    /// Memory the device can use for weights and KV, in bytes (0 when unknown).
    pub memory_bytes: u64,
    /// Capabilities that matter to kernels (`avx2`, `int8-storage`, `subgroup=32`, …).
    pub features: RVec<RString>,
}

impl DeviceInfo {
    /// Builds a device description from plain Rust values.
    pub fn new(
        name: impl Into<String>,
        vendor: impl Into<String>,
        driver: impl Into<String>,
        kind: DeviceKind,
        memory_bytes: u64,
        features: Vec<String>,
    ) -> Self {
        Self {
            name: name.into().into(),
            vendor: vendor.into().into(),
            driver: driver.into().into(),
            kind,
            memory_bytes,
            features: features.into_iter().map(RString::from).collect(),
        }
    }
}

/// A plugin's answer to "can you run here, and how well?".
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct ProbeReport {
    /// Whether `open` is expected to succeed on this node.
    pub available: bool,
    /// The plugin itself failed (panicked or errored while probing), as opposed to the node
    /// lacking its device.
    pub broken: bool,
    /// Why not, when unavailable; a note (such as "software implementation") otherwise.
    pub reason: RString,
    /// The devices found, usable or not.
    pub devices: RVec<DeviceInfo>,
    /// Higher wins. Scale used by zinc's own plugins: 1000 direct GPU queues, 800 discrete
    /// Vulkan GPU, 500 integrated, 100 CPU tier, 50 software Vulkan, 0 unavailable.
    pub score: u32,
    /// Extra facts worth showing in `zinc probe` (interface versions, paths), as key/value.
    pub details: RVec<abi_stable::std_types::Tuple2<RString, RString>>,
}

impl ProbeReport {
    /// A report for a plugin that can run.
    pub fn available(score: u32, devices: Vec<DeviceInfo>) -> Self {
        Self {
            available: true,
            broken: false,
            reason: RString::new(),
            devices: devices.into(),
            score,
            details: RVec::new(),
        }
    }
    /// A report for a plugin that cannot run here, with the reason a user should read.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self {
            available: false,
            broken: false,
            reason: reason.into().into(),
            devices: RVec::new(),
            score: 0,
            details: RVec::new(),
        }
    }
    /// A report for a plugin whose probe itself failed.
    pub fn broken(reason: impl Into<String>) -> Self {
        Self { broken: true, ..Self::unavailable(reason) }
    }
    /// Adds a key/value fact shown by `zinc probe`.
    pub fn with_detail(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.details.push(abi_stable::std_types::Tuple2(key.into().into(), value.into().into()));
        self
    }
    /// Sets the note or reason text.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into().into();
        self
    }
    /// Replaces the device list.
    pub fn with_devices(mut self, devices: Vec<DeviceInfo>) -> Self {
        self.devices = devices.into();
        self
    }
}
