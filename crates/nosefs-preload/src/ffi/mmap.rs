//! Mapped files.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use libc::{off64_t, off_t, size_t};
use nosefs_core::Errno;

use super::pointers::forget_readable_pages;
use super::rw::out_slice;
use super::{in_shim, serve, set_errno, Guard};
use crate::borrowed;
use crate::fdtable::{self, Kind};
use crate::kernel;
use crate::maps;
use crate::ops;

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    unsafe { mmap64(addr, len, prot, flags, fd, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS != 0 || !fdtable::is_ours(fd) || in_shim() {
        return unsafe {
            real!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void)(
                addr, len, prot, flags, fd, offset,
            )
        };
    }
    let mapped = serve(|| {
        match maps::map(addr as usize, len, prot, flags, fd, offset) {
            // Daemon mode: the shadow would live in the daemon; copies instead.
            Err(Errno(libc::EOPNOTSUPP)) => unsafe { map_copy(addr, len, prot, flags, fd, offset) },
            other => other.map(|p| p as *mut c_void),
        }
    });
    match mapped {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if !in_shim() {
        let unmapped = serve(|| {
            Ok(maps::unmap(addr as usize, len).or_else(|| borrowed::unmap(addr as usize, len)))
        });
        if let Some(done) = unmapped.unwrap_or(None) {
            return match done {
                Ok(()) => 0,
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
    }
    let rc = unsafe { real!(munmap: fn(*mut c_void, size_t) -> c_int)(addr, len) };
    if rc == 0 {
        forget_readable_pages();
    }
    if rc == 0 && !in_shim() {
        let _guard = Guard::enter();
        kernel::unmapped(addr as usize, len);
    }
    rc
}

/// Daemon mode: the kernel descriptor to map noseFS descriptor `fd` through (see `kernel`):
/// the description must allow what `prot` asks, as the kernel's mmap checks.
fn kernel_file_to_map(fd: c_int, prot: c_int) -> Result<Arc<kernel::KernelFile>, Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let write = prot & libc::PROT_WRITE != 0;
    if file.kind != Kind::File || !file.readable() || (write && !file.writable()) {
        return Err(Errno(libc::EACCES));
    }
    kernel::for_file(&file, true, write)
}

/// Daemon mode keeps which shared mappings of noseFS files may be stored to (`kernel`): a
/// mapping made writable here counts from now on.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if !in_shim() {
        // Embedded mode: the core tracks a mapping's stores from before it can be stored to.
        let embedded = serve(|| {
            maps::protect(addr as usize, len, prot)
                .or_else(|| borrowed::protect(addr as usize, len, prot))
                .unwrap_or(Ok(()))
        });
        if let Err(e) = embedded {
            set_errno(e);
            return -1;
        }
        if prot & libc::PROT_WRITE != 0 {
            kernel::made_writable(addr as usize, len);
        }
    }
    unsafe { real!(mprotect: fn(*mut c_void, size_t, c_int) -> c_int)(addr, len, prot) }
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    if !in_shim() {
        let synced = serve(|| {
            Ok(maps::sync(addr as usize, len).or_else(|| borrowed::sync(addr as usize, len)))
        });
        if let Some(done) = synced.unwrap_or(None) {
            return match done {
                Ok(()) => 0,
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
    }
    unsafe { real!(msync: fn(*mut c_void, size_t, c_int) -> c_int)(addr, len, flags) }
}

/// mremap cannot move or resize a mapping of a noseFS file (the core knows it by its address):
/// ENOMEM, which callers such as SQLite answer with munmap and mmap.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    // Variadic in C; on x86-64 a fifth argument travels in the same register either way. It is
    // meaningful only with MREMAP_FIXED (otherwise whatever the register held, passed on and
    // ignored by the kernel, as libc's own mremap does).
    new_addr: *mut c_void,
) -> *mut c_void {
    if !in_shim() {
        let remapped = serve(|| {
            Ok(maps::remap(old as usize, old_len, new_len, flags)
                .or_else(|| borrowed::remap(old as usize, old_len, new_len, flags)))
        });
        match remapped {
            Ok(Some(Ok(addr))) => return addr as *mut c_void,
            Ok(Some(Err(e))) | Err(e) => {
                set_errno(e);
                return libc::MAP_FAILED;
            }
            Ok(None) => {}
        }
    }
    forget_readable_pages();
    unsafe {
        real!(mremap: fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void)(
            old, old_len, new_len, flags, new_addr,
        )
    }
}

/// Daemon mode: a shared mapping goes through the kernel's FUSE mount (`maps`); a private one
/// is a copy of the file's bytes.
unsafe fn map_copy(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off64_t,
) -> Result<*mut c_void, Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let shared = flags & libc::MAP_TYPE == libc::MAP_SHARED
        || flags & libc::MAP_TYPE == libc::MAP_SHARED_VALIDATE;
    let f = real!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void);
    if shared {
        // Over the shadow the daemon lends (see `borrowed`), where the kernel tracks stores.
        match borrowed::map(addr as usize, len, prot, flags, fd, offset) {
            Err(Errno(libc::EOPNOTSUPP)) => {}
            other => return other.map(|p| p as *mut c_void),
        }
        // Else through the daemon's FUSE mount (see `kernel`): one page cache for every process.
        let kernel_file = kernel_file_to_map(fd, prot)?;
        let kernel_fd = kernel_file.raw();
        // Another process may have grown the file through the daemon since the kernel last
        // asked its size: pages past a stale size would fault SIGBUS (measured: SQLite's -shm
        // index, grown by one process and mapped by another).
        kernel::refresh_size(&kernel_file);
        let p = unsafe { f(addr, len, prot, flags, kernel_fd, offset) };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM);
            return Err(Errno(e));
        }
        kernel::mapped(&kernel_file, p as usize, len, prot & libc::PROT_WRITE != 0);
        return Ok(p);
    }
    if !file.readable() || file.kind != Kind::File {
        return Err(Errno(libc::EACCES));
    }
    if len == 0 || offset < 0 || offset % 4096 != 0 {
        return Err(Errno::EINVAL);
    }
    let keep = flags
        & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep;
    let p = unsafe { f(addr, len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM),
        ));
    }
    let dst = unsafe { out_slice(p, len) };
    let mut at = 0;
    while at < len {
        let n = ops::pread(fd, &mut dst[at..], offset + at as i64)?;
        if n == 0 {
            break;
        }
        at += n;
    }
    // SAFETY: `p..p+len` is the mapping made above.
    unsafe { libc::mprotect(p, len, prot) };
    Ok(p)
}
