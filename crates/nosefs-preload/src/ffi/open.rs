//! Open and close.

use std::ffi::{c_char, c_int, c_uint};

use libc::mode_t;
use nosefs_core::Errno;

use super::routing::{opened_or_kernel, routed_start, Routed, Started};
use super::{fail, in_shim, serve};
use crate::fdtable;
use crate::ops;
use crate::state;

#[no_mangle]
pub unsafe extern "C" fn nosefs_hook_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    let follow = flags & libc::O_NOFOLLOW == 0
        && flags & (libc::O_CREAT | libc::O_EXCL) != (libc::O_CREAT | libc::O_EXCL);
    let kernel = |p: *const c_char| {
        let f = real!(openat: fn(c_int, *const c_char, c_int, mode_t) -> c_int);
        unsafe { f(dirfd, p, flags, mode) }
    };
    // Walked and opened in one request where the path needs a walk.
    match unsafe { routed_start(dirfd, path) } {
        Started::Kernel(k) => kernel(Routed::kernel_path(&k, path)),
        Started::Walk(normal) => {
            let opened = serve(|| ops::open_path(normal, follow, flags, mode));
            opened_or_kernel(opened, kernel)
        }
        Started::In(dir, name) => {
            let opened = serve(|| ops::open_in(&dir, &name, follow, flags, mode));
            opened_or_kernel(opened, kernel)
        }
        Started::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(libc::AT_FDCWD, path, flags | libc::O_LARGEFILE, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(dirfd, path, flags | libc::O_LARGEFILE, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    unsafe {
        nosefs_hook_openat(
            libc::AT_FDCWD,
            path,
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { creat(path, mode) }
}

/// A program's attempt to close or replace one of the shim's own descriptors.
pub(super) fn refuse_internal(fd: c_int, call: &str) -> c_int {
    state::say(&format!(
        "the program's {call} of descriptor {fd} was refused: noseFS holds its image there"
    ));
    fail(Errno::EBADF)
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fdtable::is_internal(fd) && !in_shim() {
        // EBADF, as for a number that is not open, and nothing said: programs that close every
        // number up to their limit (t_open_tmpfiles, daemons at start) meet the shim's own,
        // and a line on their stderr for each was noise. A dup2 onto one is said (`fds.rs`).
        return fail(Errno::EBADF);
    }
    if fdtable::is_ours(fd) && !in_shim() {
        let file = serve(|| Ok(fdtable::remove(fd)));
        let rc = unsafe { real!(close: fn(c_int) -> c_int)(fd) };
        let _ = serve(|| {
            ops::descriptor_closed(file.ok().flatten());
            Ok(())
        });
        return rc;
    }
    unsafe { real!(close: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let f = real!(close_range: fn(c_uint, c_uint, c_int) -> c_int);
    // The shim's own descriptors are stepped over: the range is closed around them.
    let mut rc = 0;
    let mut from = first;
    for fd in fdtable::internal().into_iter().map(|fd| fd as c_uint) {
        if (from..=last).contains(&fd) {
            if fd > from {
                rc = rc.min(unsafe { f(from, fd - 1, flags) });
            }
            from = fd + 1;
        }
    }
    if from <= last && from >= first {
        rc = rc.min(unsafe { f(from, last, flags) });
    }
    if rc == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && fdtable::count() > 0 {
        let _ = serve(|| {
            for (fd, _) in fdtable::all() {
                if (first..=last).contains(&(fd as c_uint)) {
                    ops::descriptor_closed(fdtable::remove(fd));
                }
            }
            Ok(())
        });
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    unsafe { close_range(low.max(0) as c_uint, c_uint::MAX, 0) };
}
