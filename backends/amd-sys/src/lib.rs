//! AMD kernel interfaces for zinc's `kfd` and `userq` backends.
//!
//! * [`ioctl`]: ioctl numbers and `#[repr(C)]` argument structs, checked at compile time
//!   against the sizes and offsets of the kernel's uapi headers.
//! * [`drm`]: the amdgpu DRM ioctls (INFO, GEM, GEM_VA, USERQ), checked the same way;
//!   [`pm4`]: the PM4 packets a compute user queue runs.
//! * [`os`]: the operating system behind the [`os::Os`] trait: the real one ([`os::RealOs`])
//!   and a fake node ([`fake::FakeNode`]) described by a small TOML file, so the same driver
//!   code can be exercised without AMD hardware.
//! * [`topology`]: KFD topology nodes read from sysfs.

pub mod aql;
pub mod drm;
pub mod emulator;
pub mod fake;
pub mod ioctl;
pub mod os;
pub mod pm4;
pub mod topology;
pub mod userq_emulator;

pub use os::{os_for_options, Os, RealOs};
