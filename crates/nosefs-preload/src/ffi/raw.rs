//! `syscall()`: the numbers of the calls the shim serves, routed to the same hooks as libc's
//! functions of those calls, so that a program asking the kernel by number (fsstress's
//! `copy_file_range`, libuv's `statx`, `openat2`, which glibc has no function for, programs
//! built before glibc had `renameat2` or `getdents64`) gets noseFS's answer. Without this the
//! call reached the kernel with a placeholder descriptor or a path the kernel does not have:
//! a loud failure (EBADF, EPERM, ENOENT), never a write elsewhere, but not the kernel's answer.
//!
//! `syscall()` answers as the functions do (-1 and errno), so a routed call returns the hook's
//! result; the few whose function answers differently are converted here (`getcwd` returns the
//! path's length, `fadvise64` sets errno). Linux AIO goes to `aio.rs`. Every other number, and
//! the calls whose raw form means something else than the function (the credential changes,
//! per thread in the kernel, for all threads in glibc), go to libc's `syscall` unchanged. The
//! variadic entry point in variadic.c sends the futex calls there without coming here.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

use libc::{mode_t, off64_t, size_t};
use nosefs_core::Errno;

use super::routing::{routed, Routed};
use super::{aio, attr, copy, cwd, dirs, fds, ioctl, locks, mmap, names, open, process, rw};
use super::{fail, xattr};
use super::{setattr, sockets};

/// libc's own `syscall`, for every call not routed.
unsafe fn kernel(number: c_long, a: [c_long; 6]) -> c_long {
    unsafe {
        real!(syscall: fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long)(
            number, a[0], a[1], a[2], a[3], a[4], a[5],
        )
    }
}

/// `syscall(number, a1, ..., a6)` from variadic.c.
#[no_mangle]
pub unsafe extern "C" fn nosefs_hook_syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let a = [a1, a2, a3, a4, a5, a6];
    // A call a hook hands on to "the real function" may reach a library preloaded after the
    // shim that makes it by number (tcmalloc's mmap is `syscall(SYS_mmap, ...)`): that one is
    // the kernel's, not routed again.
    if ROUTING.get() {
        return unsafe { kernel(number, a) };
    }
    ROUTING.set(true);
    let r = unsafe { route(number, a) };
    ROUTING.set(false);
    r
}

thread_local! {
    /// Set while this thread runs a routed call.
    static ROUTING: Cell<bool> = const { Cell::new(false) };
}

unsafe fn route(number: c_long, a: [c_long; 6]) -> c_long {
    if let Some(r) = unsafe { aio::raw(number, a) } {
        return r;
    }
    // io_uring by number (stress-ng, programs without liburing): refused as `uring.rs` refuses
    // liburing's set-up, or the kernel's ring would be handed the placeholders of noseFS
    // descriptors.
    if number == libc::SYS_io_uring_setup && aio::serves_async_io() {
        return fail(Errno(libc::ENOSYS)) as c_long;
    }
    if number == libc::SYS_setrlimit || number == libc::SYS_prlimit64 {
        let r = unsafe { kernel(number, a) };
        crate::fsize::forget();
        return r;
    }
    if let Some(r) = unsafe { files(number, a) } {
        return r;
    }
    if let Some(r) = unsafe { names_and_attributes(number, a) } {
        return r;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(r) = unsafe { legacy(number, a) } {
        return r;
    }
    unsafe { kernel(number, a) }
}

/// Calls on descriptors: data, positions, sync, size, descriptors themselves, mappings.
unsafe fn files(number: c_long, a: [c_long; 6]) -> Option<c_long> {
    let fd = a[0] as c_int;
    let ptr = |i: usize| a[i] as *mut c_void;
    let r: c_long = unsafe {
        match number {
            libc::SYS_read => rw::read(fd, ptr(1), a[2] as size_t) as c_long,
            libc::SYS_write => rw::write(fd, ptr(1), a[2] as size_t) as c_long,
            libc::SYS_pread64 => rw::pread64(fd, ptr(1), a[2] as size_t, a[3] as off64_t) as c_long,
            libc::SYS_pwrite64 => {
                rw::pwrite64(fd, ptr(1), a[2] as size_t, a[3] as off64_t) as c_long
            }
            libc::SYS_readv => rw::readv(fd, ptr(1).cast(), a[2] as c_int) as c_long,
            libc::SYS_writev => rw::writev(fd, ptr(1).cast(), a[2] as c_int) as c_long,
            // The raw calls split the offset in two words; on 64-bit the first holds all of it.
            libc::SYS_preadv => rw::preadv64(fd, ptr(1).cast(), a[2] as c_int, a[3]) as c_long,
            libc::SYS_pwritev => rw::pwritev64(fd, ptr(1).cast(), a[2] as c_int, a[3]) as c_long,
            libc::SYS_preadv2 => {
                rw::preadv64v2(fd, ptr(1).cast(), a[2] as c_int, a[3], a[5] as c_int) as c_long
            }
            libc::SYS_pwritev2 => {
                rw::pwritev64v2(fd, ptr(1).cast(), a[2] as c_int, a[3], a[5] as c_int) as c_long
            }
            libc::SYS_lseek => rw::lseek64(fd, a[1] as off64_t, a[2] as c_int) as c_long,
            libc::SYS_fsync => rw::fsync(fd) as c_long,
            libc::SYS_fdatasync => rw::fdatasync(fd) as c_long,
            libc::SYS_sync_file_range => {
                rw::sync_file_range(fd, a[1] as off64_t, a[2] as off64_t, a[3] as c_uint) as c_long
            }
            libc::SYS_syncfs => rw::syncfs(fd) as c_long,
            libc::SYS_sync => {
                rw::sync();
                0
            }
            libc::SYS_ftruncate => rw::ftruncate64(fd, a[1] as off64_t) as c_long,
            libc::SYS_readahead => rw::readahead(fd, a[1] as off64_t, a[2] as size_t) as c_long,
            libc::SYS_fallocate => {
                rw::fallocate64(fd, a[1] as c_int, a[2] as off64_t, a[3] as off64_t) as c_long
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_fadvise64 => errno_result(rw::posix_fadvise64(
                fd,
                a[1] as off64_t,
                a[2] as off64_t,
                a[3] as c_int,
            )),
            libc::SYS_getdents64 => dirs::getdents64(fd, ptr(1), a[2] as size_t) as c_long,
            libc::SYS_close => open::close(fd) as c_long,
            libc::SYS_close_range => {
                open::close_range(a[0] as c_uint, a[1] as c_uint, a[2] as c_int) as c_long
            }
            libc::SYS_dup => fds::dup(fd) as c_long,
            libc::SYS_dup3 => fds::dup3(fd, a[1] as c_int, a[2] as c_int) as c_long,
            libc::SYS_fcntl => fds::nosefs_hook_fcntl(fd, a[1] as c_int, ptr(2)) as c_long,
            libc::SYS_ioctl => ioctl::nosefs_hook_ioctl(fd, a[1] as c_ulong, ptr(2)) as c_long,
            libc::SYS_flock => locks::flock(fd, a[1] as c_int) as c_long,
            libc::SYS_fchdir => cwd::fchdir(fd) as c_long,
            libc::SYS_fstatfs => attr::fstatfs(fd, ptr(1).cast()) as c_long,
            libc::SYS_copy_file_range => copy::copy_file_range(
                fd,
                ptr(1).cast(),
                a[2] as c_int,
                ptr(3).cast(),
                a[4] as size_t,
                a[5] as c_uint,
            ) as c_long,
            libc::SYS_splice => copy::splice(
                fd,
                ptr(1).cast(),
                a[2] as c_int,
                ptr(3).cast(),
                a[4] as size_t,
                a[5] as c_uint,
            ) as c_long,
            libc::SYS_sendfile => {
                copy::sendfile(fd, a[1] as c_int, ptr(2).cast(), a[3] as size_t) as c_long
            }
            // Allocators map memory so: only a mapping of a noseFS file is the shim's.
            libc::SYS_mmap if !crate::fdtable::is_ours(a[4] as c_int) => return None,
            libc::SYS_mmap => mmap::mmap64(
                ptr(0),
                a[1] as size_t,
                a[2] as c_int,
                a[3] as c_int,
                a[4] as c_int,
                a[5] as off64_t,
            ) as c_long,
            libc::SYS_munmap => mmap::munmap(ptr(0), a[1] as size_t) as c_long,
            libc::SYS_mprotect => mmap::mprotect(ptr(0), a[1] as size_t, a[2] as c_int) as c_long,
            libc::SYS_msync => mmap::msync(ptr(0), a[1] as size_t, a[2] as c_int) as c_long,
            libc::SYS_mremap => mmap::mremap(
                ptr(0),
                a[1] as size_t,
                a[2] as size_t,
                a[3] as c_int,
                ptr(4),
            ) as c_long,
            libc::SYS_bind => sockets::bind(fd, ptr(1).cast(), a[2] as libc::socklen_t) as c_long,
            libc::SYS_connect => {
                sockets::connect(fd, ptr(1).cast(), a[2] as libc::socklen_t) as c_long
            }
            libc::SYS_fgetxattr => {
                xattr::fgetxattr(fd, ptr(1).cast(), ptr(2), a[3] as size_t) as c_long
            }
            libc::SYS_fsetxattr => {
                xattr::fsetxattr(fd, ptr(1).cast(), ptr(2), a[3] as size_t, a[4] as c_int) as c_long
            }
            libc::SYS_flistxattr => xattr::flistxattr(fd, ptr(1).cast(), a[2] as size_t) as c_long,
            libc::SYS_fremovexattr => xattr::fremovexattr(fd, ptr(1).cast()) as c_long,
            libc::SYS_fchmod => setattr::fchmod(fd, a[1] as mode_t) as c_long,
            libc::SYS_fchown => {
                setattr::fchown(fd, a[1] as libc::uid_t, a[2] as libc::gid_t) as c_long
            }
            libc::SYS_fstat => attr::fstat(fd, ptr(1).cast()) as c_long,
            _ => return None,
        }
    };
    Some(r)
}

/// Calls on paths (relative to a directory descriptor or not).
unsafe fn names_and_attributes(number: c_long, a: [c_long; 6]) -> Option<c_long> {
    let dirfd = a[0] as c_int;
    let path = |i: usize| a[i] as *const c_char;
    let ptr = |i: usize| a[i] as *mut c_void;
    let r: c_long = unsafe {
        match number {
            libc::SYS_openat => {
                open::nosefs_hook_openat(dirfd, path(1), a[2] as c_int, a[3] as mode_t) as c_long
            }
            libc::SYS_openat2 => openat2(a),
            libc::SYS_newfstatat => {
                attr::fstatat(dirfd, path(1), ptr(2).cast(), a[3] as c_int) as c_long
            }
            libc::SYS_statx => {
                attr::statx(dirfd, path(1), a[2] as c_int, a[3] as c_uint, ptr(4).cast()) as c_long
            }
            libc::SYS_statfs => attr::statfs(path(0), ptr(1).cast()) as c_long,
            libc::SYS_faccessat => attr::faccessat(dirfd, path(1), a[2] as c_int, 0) as c_long,
            libc::SYS_faccessat2 => {
                attr::faccessat2(dirfd, path(1), a[2] as c_int, a[3] as c_int) as c_long
            }
            libc::SYS_mkdirat => names::mkdirat(dirfd, path(1), a[2] as mode_t) as c_long,
            libc::SYS_mknodat => {
                names::mknodat(dirfd, path(1), a[2] as mode_t, a[3] as libc::dev_t) as c_long
            }
            libc::SYS_unlinkat => names::unlinkat(dirfd, path(1), a[2] as c_int) as c_long,
            libc::SYS_symlinkat => names::symlinkat(path(0), a[1] as c_int, path(2)) as c_long,
            libc::SYS_readlinkat => {
                names::readlinkat(dirfd, path(1), ptr(2).cast(), a[3] as size_t) as c_long
            }
            libc::SYS_renameat => names::renameat(dirfd, path(1), a[2] as c_int, path(3)) as c_long,
            libc::SYS_renameat2 => {
                names::renameat2(dirfd, path(1), a[2] as c_int, path(3), a[4] as c_uint) as c_long
            }
            libc::SYS_linkat => {
                names::linkat(dirfd, path(1), a[2] as c_int, path(3), a[4] as c_int) as c_long
            }
            libc::SYS_fchmodat => setattr::fchmodat(dirfd, path(1), a[2] as mode_t, 0) as c_long,
            libc::SYS_fchownat => setattr::fchownat(
                dirfd,
                path(1),
                a[2] as libc::uid_t,
                a[3] as libc::gid_t,
                a[4] as c_int,
            ) as c_long,
            libc::SYS_utimensat => {
                setattr::utimensat(dirfd, path(1), ptr(2).cast(), a[3] as c_int) as c_long
            }
            libc::SYS_getxattr => {
                xattr::getxattr(path(0), path(1), ptr(2), a[3] as size_t) as c_long
            }
            libc::SYS_lgetxattr => {
                xattr::lgetxattr(path(0), path(1), ptr(2), a[3] as size_t) as c_long
            }
            libc::SYS_setxattr => {
                xattr::setxattr(path(0), path(1), ptr(2), a[3] as size_t, a[4] as c_int) as c_long
            }
            libc::SYS_lsetxattr => {
                xattr::lsetxattr(path(0), path(1), ptr(2), a[3] as size_t, a[4] as c_int) as c_long
            }
            libc::SYS_listxattr => {
                xattr::listxattr(path(0), ptr(1).cast(), a[2] as size_t) as c_long
            }
            libc::SYS_llistxattr => {
                xattr::llistxattr(path(0), ptr(1).cast(), a[2] as size_t) as c_long
            }
            libc::SYS_removexattr => xattr::removexattr(path(0), path(1)) as c_long,
            libc::SYS_lremovexattr => xattr::lremovexattr(path(0), path(1)) as c_long,
            libc::SYS_truncate => rw::truncate64(path(0), a[1] as off64_t) as c_long,
            libc::SYS_chdir => cwd::chdir(path(0)) as c_long,
            libc::SYS_getcwd => {
                // The kernel's answer is the length of the path with its NUL, not the buffer.
                // (A null buffer is the kernel's EFAULT: glibc's getcwd would allocate one.)
                let buf = ptr(0).cast::<c_char>();
                if buf.is_null() {
                    fail(Errno(libc::EFAULT)) as c_long
                } else if cwd::getcwd(buf, a[1] as size_t).is_null() {
                    -1
                } else {
                    libc::strlen(buf) as c_long + 1
                }
            }
            libc::SYS_execve => process::execve(path(0), ptr(1).cast(), ptr(2).cast()) as c_long,
            libc::SYS_execveat => {
                process::execveat(dirfd, path(1), ptr(2).cast(), ptr(3).cast(), a[4] as c_int)
                    as c_long
            }
            _ => return None,
        }
    };
    Some(r)
}

/// The x86-64 calls that newer architectures have only in their `*at` forms.
#[cfg(target_arch = "x86_64")]
unsafe fn legacy(number: c_long, a: [c_long; 6]) -> Option<c_long> {
    let path = |i: usize| a[i] as *const c_char;
    let ptr = |i: usize| a[i] as *mut c_void;
    let r: c_long = unsafe {
        match number {
            libc::SYS_open => {
                open::nosefs_hook_openat(libc::AT_FDCWD, path(0), a[1] as c_int, a[2] as mode_t)
                    as c_long
            }
            libc::SYS_creat => open::creat(path(0), a[1] as mode_t) as c_long,
            libc::SYS_stat => attr::stat(path(0), ptr(1).cast()) as c_long,
            libc::SYS_lstat => attr::lstat(path(0), ptr(1).cast()) as c_long,
            libc::SYS_access => attr::access(path(0), a[1] as c_int) as c_long,
            libc::SYS_dup2 => fds::dup2(a[0] as c_int, a[1] as c_int) as c_long,
            libc::SYS_mkdir => names::mkdir(path(0), a[1] as mode_t) as c_long,
            libc::SYS_rmdir => names::rmdir(path(0)) as c_long,
            libc::SYS_unlink => names::unlink(path(0)) as c_long,
            libc::SYS_rename => names::rename(path(0), path(1)) as c_long,
            libc::SYS_link => names::link(path(0), path(1)) as c_long,
            libc::SYS_symlink => names::symlink(path(0), path(1)) as c_long,
            libc::SYS_readlink => names::readlink(path(0), ptr(1).cast(), a[2] as size_t) as c_long,
            libc::SYS_mknod => names::mknod(path(0), a[1] as mode_t, a[2] as libc::dev_t) as c_long,
            libc::SYS_chmod => setattr::chmod(path(0), a[1] as mode_t) as c_long,
            libc::SYS_chown => {
                setattr::chown(path(0), a[1] as libc::uid_t, a[2] as libc::gid_t) as c_long
            }
            libc::SYS_lchown => {
                setattr::lchown(path(0), a[1] as libc::uid_t, a[2] as libc::gid_t) as c_long
            }
            libc::SYS_utime => setattr::utime(path(0), ptr(1).cast()) as c_long,
            libc::SYS_utimes => setattr::utimes(path(0), ptr(1).cast()) as c_long,
            libc::SYS_futimesat => {
                setattr::futimesat(a[0] as c_int, path(1), ptr(2).cast()) as c_long
            }
            _ => return None,
        }
    };
    Some(r)
}

/// A function that answers with an error number (posix_fadvise) as `syscall()` answers.
fn errno_result(e: c_int) -> c_long {
    if e == 0 {
        0
    } else {
        fail(Errno(e)) as c_long
    }
}

/// `openat2(dirfd, path, &how, size)`, which glibc has no function for. On the kernel's paths,
/// the kernel's call. On noseFS's, the open `how` asks for when it asks for no resolution
/// restriction, with the kernel's checks of `how`; with one (RESOLVE_BENEATH and the like),
/// ENOSYS: what a kernel without openat2 answers, so that programs take their `openat` path.
unsafe fn openat2(a: [c_long; 6]) -> c_long {
    let (dirfd, path) = (a[0] as c_int, a[1] as *const c_char);
    let (how, size) = (a[2] as *const u64, a[3] as size_t);
    match unsafe { routed(dirfd, path, true) } {
        Routed::Kernel(_) => unsafe { kernel(libc::SYS_openat2, a) },
        Routed::Err(e) => fail(e) as c_long,
        Routed::Ours(_) => {
            const OPEN_HOW_BYTES: size_t = 24;
            if how.is_null() {
                return fail(Errno(libc::EFAULT)) as c_long;
            }
            if size < OPEN_HOW_BYTES {
                return fail(Errno::EINVAL) as c_long;
            }
            // SAFETY: `how` points at `size` (at least 24) bytes: struct open_how's three u64s.
            let (flags, mode, resolve) = unsafe {
                (
                    how.read_unaligned(),
                    how.add(1).read_unaligned(),
                    how.add(2).read_unaligned(),
                )
            };
            // O_TMPFILE without the O_DIRECTORY it carries, as the kernel tests it.
            let tmpfile = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
            let creates = flags & (libc::O_CREAT as u64 | tmpfile) != 0;
            if flags >> 32 != 0 || mode & !0o7777 != 0 || (mode != 0 && !creates) {
                return fail(Errno::EINVAL) as c_long;
            }
            if resolve != 0 {
                return fail(Errno(libc::ENOSYS)) as c_long;
            }
            unsafe {
                open::nosefs_hook_openat(dirfd, path, flags as c_int, mode as mode_t) as c_long
            }
        }
    }
}
