//! Locks on noseFS descriptors: flock, POSIX record locks (fcntl's F_SETLK family, lockf).

use std::ffi::{c_int, c_void};

use libc::{off64_t, off_t};
use nosefs_core::Errno;

use super::{fail, in_shim, serve};
use crate::fdtable;
use crate::ops;

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    let real_flock = real!(flock: fn(c_int, c_int) -> c_int);
    if fdtable::is_ours(fd) && !in_shim() {
        return match serve(|| ops::lock_fd(fd)) {
            Ok((_file, kernel_fd)) => unsafe { real_flock(kernel_fd, op) },
            Err(e) => fail(e),
        };
    }
    unsafe { real_flock(fd, op) }
}

/// POSIX record locks of noseFS descriptor `fd`: embedded mode serves one process, where they
/// never conflict (granted; F_GETLK finds no conflicting lock); daemon mode takes them on the
/// file's kernel descriptor through the FUSE mount, where the kernel arbitrates between processes
/// (`kernel`, `ops::record_lock_file`).
pub(super) fn record_lock(fd: c_int, cmd: c_int, lock: &mut libc::flock) -> c_int {
    match serve(|| ops::record_lock_file(fd, lock.l_type as c_int, cmd != libc::F_GETLK)) {
        Ok(None) => {
            if cmd == libc::F_GETLK {
                lock.l_type = libc::F_UNLCK as i16;
            }
            0
        }
        Ok(Some((kernel, offset))) => {
            let rc = unsafe { kernel_lock(kernel.raw(), cmd, lock, offset) };
            if rc == 0 && cmd != libc::F_GETLK && lock.l_type != libc::F_UNLCK as i16 {
                kernel.note_locked();
            }
            rc
        }
        Err(e) => fail(e),
    }
}

/// A lock command on kernel descriptor `kernel_fd`, for a description at `offset` (whose offset
/// the kernel descriptor does not share: SEEK_CUR is made absolute).
///
/// # Safety
/// `kernel_fd` is one of the shim's kernel descriptors.
pub(super) unsafe fn kernel_lock(
    kernel_fd: c_int,
    cmd: c_int,
    lock: &mut libc::flock,
    offset: u64,
) -> c_int {
    let mut asked = *lock;
    if asked.l_whence == libc::SEEK_CUR as i16 {
        asked.l_start = asked.l_start.saturating_add(offset as i64);
        asked.l_whence = libc::SEEK_SET as i16;
    }
    let f = real!(fcntl: fn(c_int, c_int, *mut c_void) -> c_int);
    // SAFETY: the lock commands take a struct flock; `asked` is one.
    let rc = unsafe { f(kernel_fd, cmd, (&raw mut asked).cast()) };
    if rc == 0 && (cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK) {
        *lock = asked;
    }
    rc
}

/// lockf, as glibc makes it of fcntl (its own fcntl call does not reach the shim's).
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    if !fdtable::is_ours(fd) || in_shim() {
        return unsafe { real!(lockf: fn(c_int, c_int, off_t) -> c_int)(fd, cmd, len) };
    }
    // SAFETY: struct flock is plain data.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_whence = libc::SEEK_CUR as i16;
    lock.l_len = len;
    let (command, l_type) = match cmd {
        libc::F_TEST => (libc::F_GETLK, libc::F_RDLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        _ => return fail(Errno::EINVAL),
    };
    lock.l_type = l_type as i16;
    let rc = record_lock(fd, command, &mut lock);
    if rc != 0 || cmd != libc::F_TEST {
        return rc;
    }
    if lock.l_type == libc::F_UNLCK as i16 || lock.l_pid == std::process::id() as i32 {
        0
    } else {
        fail(Errno(libc::EACCES))
    }
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    unsafe { lockf(fd, cmd, len) }
}
