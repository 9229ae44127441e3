//! Directory calls through libc, the crate's only `unsafe`.
//!
//! The `dir:`, `tmpfs`, `ramdisk:` and `nosefs-preload` targets must make the same libc calls,
//! because the preload shim sees only calls into libc: rustix (the crate's usual system-call
//! layer) enters the kernel directly, past any LD_PRELOAD library. File data goes through
//! `std::fs::File` (whose `pread`, `pwrite` and `fsync` are libc's).

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `openat(dir, name, flags, mode)`; `dir` `None` is AT_FDCWD.
pub fn openat(
    dir: Option<BorrowedFd<'_>>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let dir = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `name` is NUL-terminated; the result is a new descriptor nobody else owns.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `renameat(from, old, to, new)`.
pub fn renameat(
    from: BorrowedFd<'_>,
    old: &CStr,
    to: BorrowedFd<'_>,
    new: &CStr,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated.
    check(unsafe { libc::renameat(from.as_raw_fd(), old.as_ptr(), to.as_raw_fd(), new.as_ptr()) })
        .map(drop)
}

/// `unlinkat(dir, name, 0)`.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
}

/// The size `fstatat(dir, name, 0)` reports.
pub fn size_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<u64> {
    // SAFETY: struct stat is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable and sized for fstatat; `name` is NUL-terminated.
    check(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, 0) })?;
    Ok(st.st_size as u64)
}

/// The size of open file `fd` (`fstat`, as C programs ask; std's `metadata` uses statx).
pub fn size_of(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: struct stat is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable and sized for fstat.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_size as u64)
}

/// `lseek(fd, 0, SEEK_CUR)`: the cheapest call on an open file, for the cost of a call itself.
pub fn seek_current(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: lseek reads no memory.
    let at = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_CUR) };
    if at < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(at as u64)
    }
}

/// The file-system type `statfs(path)` reports (`f_type`).
pub fn fs_type(path: &CStr) -> io::Result<i64> {
    // SAFETY: struct statfs is plain data; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable and sized for statfs; `path` is NUL-terminated.
    check(unsafe { libc::statfs(path.as_ptr(), &mut st) })?;
    Ok(st.f_type as i64)
}

/// A global allocator that forwards to the system's and counts the bytes live, for examples that
/// report what a mounted file system holds (RSS is no measure of it: freed pages stay with the
/// process). Install it with `#[global_allocator]`; read it with [`live_heap_bytes`].
#[derive(Debug)]
pub struct CountingAllocator;

static LIVE_HEAP_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Heap bytes allocated and not yet freed through [`CountingAllocator`].
pub fn live_heap_bytes() -> usize {
    LIVE_HEAP_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_HEAP_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on unchanged.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_HEAP_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator's `alloc` with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc` and `alloc`.
        let new = unsafe { std::alloc::System.realloc(ptr, layout, size) };
        if !new.is_null() {
            LIVE_HEAP_BYTES.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
            LIVE_HEAP_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        new
    }
}

/// A shared, writable mapping of a whole file made through libc's `mmap` (so that the preload
/// shim serves it for noseFS files), unmapped on drop.
#[derive(Debug)]
pub struct Mapped {
    addr: usize,
    len: usize,
}

impl Mapped {
    /// Maps `map_len` bytes of `fd` (a file of `file_len` bytes, no longer than the mapping)
    /// from offset 0, shared; the file's pages are faulted in when the mapping is the file's
    /// size (past the end of a file a page cannot be).
    pub fn map(fd: BorrowedFd<'_>, file_len: usize, map_len: usize) -> io::Result<Mapped> {
        let populate = if map_len == file_len {
            libc::MAP_POPULATE
        } else {
            0
        };
        // SAFETY: a new mapping where the kernel (or the shim) chooses; it overlaps nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | populate,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped {
            addr: p as usize,
            len: map_len,
        })
    }

    /// Stores `data` at `offset` of the mapping.
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len, "store past the mapping");
        // SAFETY: the range is inside the live, writable mapping (asserted).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                (self.addr + offset) as *mut u8,
                data.len(),
            )
        }
    }

    /// `msync(MS_SYNC)` of the pages holding `offset..offset + len`.
    pub fn msync(&self, offset: usize, len: usize) -> io::Result<()> {
        let start = offset / 4096 * 4096;
        let end = (offset + len).min(self.len);
        // SAFETY: msync of pages inside the live mapping.
        check(unsafe {
            libc::msync(
                (self.addr + start) as *mut libc::c_void,
                end - start,
                libc::MS_SYNC,
            )
        })
        .map(drop)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers to it once dropped.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

// SAFETY: the mapping is plain shared memory; the workloads store to disjoint offsets.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}
