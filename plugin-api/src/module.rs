//! The root module every plugin exports, and the guards around its entry points.

use crate::{
    backend::BackendBox,
    error::{ErrorKind, PluginError, PluginResult},
    probe::ProbeReport,
};
use abi_stable::{
    library::RootModule,
    sabi_types::VersionStrings,
    std_types::{RResult, RString, RVec, Tuple2},
    StableAbi,
};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Per-plugin options from `plugins.toml`, as key/value strings.
pub type OptionList = RVec<Tuple2<RString, RString>>;

/// The version of this interface, `major.minor.patch`. The host refuses a plugin whose
/// interface is not compatible (for 0.x versions: a different minor) or whose type layouts
/// differ, naming the file and both versions.
#[cfg(not(feature = "test-foreign-interface"))]
pub const INTERFACE_VERSION: &str = env!("CARGO_PKG_VERSION");
/// A deliberately foreign interface version, for the refusal test's fixture only.
#[cfg(feature = "test-foreign-interface")]
pub const INTERFACE_VERSION: &str = "0.99.0";

/// The root module: three entry points, all synchronous and panic-free across the boundary.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = BackendModRef)))]
#[sabi(missing_field(panic))]
pub struct BackendMod {
    /// The backend's short name (`cpu`, `vulkan`, `kfd`, `userq`), used for `--backend`.
    pub name: extern "C" fn() -> RString,
    /// Looks at the node without opening anything heavy.
    pub probe: extern "C" fn(options: &OptionList) -> ProbeReport,
    /// Opens the backend on its best device.
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn(options: &OptionList) -> RResult<BackendBox, PluginError>,
    /// Runs the driver's self-test on this node and returns its evidence, one step a line
    /// (`zinc smoke NAME`). Added after the prefix: plugins built before it still load.
    #[sabi(missing_field(option))]
    pub smoke: extern "C" fn(options: &OptionList) -> RResult<RString, PluginError>,
}

impl RootModule for BackendModRef {
    abi_stable::declare_root_module_statics! {BackendModRef}
    const BASE_NAME: &'static str = "zinc_backend";
    const NAME: &'static str = "zinc_backend";
    #[cfg(not(feature = "test-foreign-interface"))]
    const VERSION_STRINGS: VersionStrings = abi_stable::package_version_strings!();
    #[cfg(feature = "test-foreign-interface")]
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("0.99.0");
}

/// Looks up an option by key.
pub fn option<'a>(options: &'a OptionList, key: &str) -> Option<&'a str> {
    options.iter().find(|kv| kv.0.as_str() == key).map(|kv| kv.1.as_str())
}

/// What a backend crate implements; [`crate::export_plugin!`] turns it into the root module.
pub trait Plugin {
    /// Short name, as used by `--backend`.
    const NAME: &'static str;
    /// Looks at the node. Must not panic, but if it does the guard reports it as broken.
    fn probe(options: &OptionList) -> ProbeReport;
    /// Opens the backend.
    fn open(options: &OptionList) -> PluginResult<BackendBox>;
    /// The driver's self-test (see [`BackendMod::smoke`]).
    fn smoke(_options: &OptionList) -> PluginResult<String> {
        Err(PluginError::unsupported(format!("the {} backend has no smoke test", Self::NAME)))
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into a [`PluginError`] of kind [`ErrorKind::Panic`].
pub fn guard<T>(what: &str, f: impl FnOnce() -> PluginResult<T>) -> RResult<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => RResult::ROk(v),
        Ok(Err(e)) => RResult::RErr(e),
        Err(payload) => RResult::RErr(PluginError::new(
            ErrorKind::Panic,
            format!("plugin panicked while trying to {what}: {}", panic_message(&*payload)),
        )),
    }
}

/// The guarded probe entry point used by [`crate::export_plugin!`].
pub fn guarded_probe<P: Plugin>(options: &OptionList) -> ProbeReport {
    match catch_unwind(AssertUnwindSafe(|| P::probe(options))) {
        Ok(report) => report,
        Err(payload) => ProbeReport::broken(format!("probe panicked: {}", panic_message(&*payload))),
    }
}

/// The guarded open entry point used by [`crate::export_plugin!`].
pub fn guarded_open<P: Plugin>(options: &OptionList) -> RResult<BackendBox, PluginError> {
    guard("open", || P::open(options))
}

/// The guarded smoke entry point used by [`crate::export_plugin!`].
pub fn guarded_smoke<P: Plugin>(options: &OptionList) -> RResult<RString, PluginError> {
    guard("run its smoke test", || P::smoke(options).map(RString::from))
}

/// Exports a [`Plugin`] implementation as this library's zinc backend root module.
///
/// The crate using it must depend on `abi_stable` directly (its proc macro names it).
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[::abi_stable::export_root_module]
        pub fn zinc_backend_root_module() -> $crate::BackendModRef {
            use ::abi_stable::prefix_type::PrefixTypeTrait;
            extern "C" fn name() -> ::abi_stable::std_types::RString {
                <$plugin as $crate::Plugin>::NAME.into()
            }
            extern "C" fn probe(options: &$crate::OptionList) -> $crate::ProbeReport {
                $crate::module::guarded_probe::<$plugin>(options)
            }
            extern "C" fn open(
                options: &$crate::OptionList,
            ) -> ::abi_stable::std_types::RResult<$crate::BackendBox, $crate::PluginError> {
                $crate::module::guarded_open::<$plugin>(options)
            }
            extern "C" fn smoke(
                options: &$crate::OptionList,
            ) -> ::abi_stable::std_types::RResult<::abi_stable::std_types::RString, $crate::PluginError> {
                $crate::module::guarded_smoke::<$plugin>(options)
            }
            $crate::BackendMod { name, probe, open, smoke }.leak_into_prefix()
        }
    };
}
