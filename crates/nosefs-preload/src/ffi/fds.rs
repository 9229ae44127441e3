//! Descriptors: dup and fcntl (ioctls: `ioctl.rs`; locks: `locks.rs`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use nosefs_core::Errno;

use super::locks::{kernel_lock, record_lock};
use super::open::refuse_internal;
use super::{fail, in_shim, serve};
use crate::fdtable;
use crate::ops;

/// Registers `new` as another descriptor of `old`'s description after the kernel duplicated it.
fn adopt_dup(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    let _ = serve(|| {
        let dropped = match fdtable::get(old) {
            Some(file) if (new as usize) < fdtable::MAX_FDS => fdtable::insert(new, file),
            _ => fdtable::remove(new),
        };
        ops::descriptor_closed(dropped);
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let new = unsafe { real!(dup: fn(c_int) -> c_int)(fd) };
    if fdtable::is_ours(fd) {
        adopt_dup(fd, new);
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if fdtable::is_internal(new) && !in_shim() {
        return refuse_internal(new, "dup2");
    }
    let rc = unsafe { real!(dup2: fn(c_int, c_int) -> c_int)(old, new) };
    if rc >= 0 && old != new && (fdtable::is_ours(old) || fdtable::is_ours(new)) {
        adopt_dup(old, rc);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if fdtable::is_internal(new) && !in_shim() {
        return refuse_internal(new, "dup3");
    }
    let rc = unsafe { real!(dup3: fn(c_int, c_int, c_int) -> c_int)(old, new, flags) };
    if rc >= 0 && (fdtable::is_ours(old) || fdtable::is_ours(new)) {
        adopt_dup(old, rc);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn nosefs_hook_fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    let f = real!(fcntl: fn(c_int, c_int, *mut c_void) -> c_int);
    if !fdtable::is_ours(fd) || in_shim() {
        return unsafe { f(fd, cmd, arg) };
    }
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let new = unsafe { f(fd, cmd, arg) };
            adopt_dup(fd, new);
            new
        }
        libc::F_GETFL => match fdtable::get(fd) {
            Some(file) => file.flags.load(Ordering::Relaxed),
            None => fail(Errno::EBADF),
        },
        libc::F_SETFL => match fdtable::get(fd) {
            Some(file) => {
                let settable = libc::O_APPEND | libc::O_NONBLOCK | libc::O_NOATIME | libc::O_DIRECT;
                let new = arg as usize as c_int;
                let old = file.flags.load(Ordering::Relaxed);
                file.flags
                    .store((old & !settable) | (new & settable), Ordering::Relaxed);
                0
            }
            None => fail(Errno::EBADF),
        },
        libc::F_SETLK | libc::F_SETLKW | libc::F_GETLK => {
            if arg.is_null() {
                return fail(Errno(libc::EFAULT));
            }
            // SAFETY: the lock commands take a struct flock, which the caller passed.
            let lock = unsafe { &mut *arg.cast::<libc::flock>() };
            record_lock(fd, cmd, lock)
        }
        libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_OFD_GETLK => {
            if arg.is_null() {
                return fail(Errno(libc::EFAULT));
            }
            // SAFETY: as above.
            let lock = unsafe { &mut *arg.cast::<libc::flock>() };
            match serve(|| ops::lock_fd(fd)) {
                // On the description's kernel descriptor: through the FUSE mount in daemon mode,
                // of the memfd standing for the file in embedded mode, whose size is not the
                // file's: a range from the end is made absolute first.
                Ok((file, kernel_fd)) => {
                    if lock.l_whence == libc::SEEK_END as i16 && !crate::state::daemon_mode() {
                        match serve(|| ops::fstat(fd)) {
                            Ok(attr) => {
                                let size = i64::try_from(attr.size).unwrap_or(i64::MAX);
                                lock.l_start = lock.l_start.saturating_add(size);
                                lock.l_whence = libc::SEEK_SET as i16;
                            }
                            Err(e) => return fail(e),
                        }
                    }
                    let offset = *file.offset.lock();
                    unsafe { kernel_lock(kernel_fd, cmd, lock, offset) }
                }
                Err(e) => fail(e),
            }
        }
        // Descriptor flags (FD_CLOEXEC) live on the placeholder, in the kernel.
        libc::F_GETFD | libc::F_SETFD => unsafe { f(fd, cmd, arg) },
        libc::F_ADD_SEALS | libc::F_GET_SEALS => fail(Errno::EINVAL),
        libc::F_GETPIPE_SZ | libc::F_SETPIPE_SZ => fail(Errno::EBADF),
        _ => fail(Errno::EINVAL),
    }
}
