//! The operating system as the AMD drivers see it: files, device nodes and ioctls.

use crate::fake::FakeNode;
use std::{
    io,
    path::{Path, PathBuf},
    sync::Arc,
};

/// A device file handle returned by [`Os::open`].
pub type Fd = i32;

/// Everything the kfd and userq drivers ask of the OS. The real driver logic runs unchanged
/// against [`RealOs`] or a fake node.
pub trait Os: Send + Sync {
    /// Reads a whole text file (sysfs).
    fn read_to_string(&self, path: &Path) -> io::Result<String>;
    /// Lists a directory's entries (full paths), sorted.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Opens a device node read-write.
    fn open_rw(&self, path: &Path) -> io::Result<Fd>;
    /// Closes a handle from `open_rw`.
    fn close(&self, fd: Fd);
    /// Issues `request` with `arg` as its argument struct; `arg.len()` must equal the size
    /// encoded in `request`.
    fn ioctl(&self, fd: Fd, request: u64, arg: &mut [u8]) -> io::Result<()>;
    /// A short description for probe output (`linux` or `fake node <file>`).
    fn describe(&self) -> String;
    /// True for a fake node: devices found through it are reported as emulated.
    fn is_emulated(&self) -> bool {
        false
    }
}

/// The real Linux interface.
#[derive(Debug, Default)]
pub struct RealOs;

impl Os for RealOs {
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> =
            std::fs::read_dir(path)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        v.sort();
        Ok(v)
    }
    fn open_rw(&self, path: &Path) -> io::Result<Fd> {
        use std::os::fd::IntoRawFd;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        Ok(f.into_raw_fd())
    }
    fn close(&self, fd: Fd) {
        let _ = nix::unistd::close(fd);
    }
    fn ioctl(&self, fd: Fd, request: u64, arg: &mut [u8]) -> io::Result<()> {
        if arg.len() != crate::ioctl::ioc_size(request) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ioctl {request:#x}: argument is {} bytes", arg.len()),
            ));
        }
        // SAFETY: `arg` is a live buffer of exactly the size the request encodes; the kernel
        // reads and writes within it (and through pointers the caller placed in it).
        let rc = unsafe { libc::ioctl(fd, request as libc::c_ulong, arg.as_mut_ptr()) };
        nix::errno::Errno::result(rc).map(|_| ()).map_err(io::Error::from)
    }
    fn describe(&self) -> String {
        "linux".into()
    }
}

/// The OS a plugin should use given its options: a fake node when `emulate` names a node
/// description file (a test-only switch), the real OS otherwise.
pub fn os_for_options(emulate: Option<&str>) -> io::Result<Arc<dyn Os>> {
    match emulate {
        Some(path) if !path.is_empty() => Ok(Arc::new(FakeNode::from_file(Path::new(path))?)),
        _ => Ok(Arc::new(RealOs)),
    }
}
