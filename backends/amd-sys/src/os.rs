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
    /// Maps memory: anonymous when `fd` is `None`, else the device file at `offset`. `addr`
    /// 0 lets the OS choose; with `MAP_FIXED` in `flags` the mapping goes exactly there.
    fn mmap(&self, addr: usize, len: usize, prot: i32, flags: i32, fd: Option<Fd>, offset: u64) -> io::Result<usize>;
    /// Unmaps memory mapped by `mmap`.
    fn munmap(&self, addr: usize, len: usize) -> io::Result<()>;
    /// A short description for probe output (`linux` or `fake node <file>`).
    fn describe(&self) -> String;
    /// True for a fake node: devices found through it are reported as emulated.
    fn is_emulated(&self) -> bool {
        false
    }
    /// On an emulated device, binds a host function to a kernel object address; real devices
    /// run code objects and answer false.
    fn register_host_kernel(&self, _object: u64, _f: crate::emulator::HostKernel) -> bool {
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
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
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
    fn mmap(&self, addr: usize, len: usize, prot: i32, flags: i32, fd: Option<Fd>, offset: u64) -> io::Result<usize> {
        raw_mmap(addr, len, prot, flags, fd, offset)
    }
    fn munmap(&self, addr: usize, len: usize) -> io::Result<()> {
        raw_munmap(addr, len)
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

/// `mmap(2)`, for the real OS and for the fake node's host memory.
pub fn raw_mmap(addr: usize, len: usize, prot: i32, flags: i32, fd: Option<Fd>, offset: u64) -> io::Result<usize> {
    let flags = if fd.is_none() { flags | libc::MAP_ANONYMOUS } else { flags };
    // SAFETY: plain mmap call; the caller owns the address range it asks for (MAP_FIXED is
    // only used over ranges the caller reserved itself).
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len, prot, flags, fd.unwrap_or(-1), offset as libc::off_t) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as usize)
}

/// `munmap(2)`.
pub fn raw_munmap(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: unmapping a range this process mapped.
    let rc = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
