//! Names.

use std::ffi::{c_char, c_int, c_uint};

use libc::{mode_t, size_t, ssize_t};
use nosefs_core::Errno;

use super::pointers::bytes;
use super::routing::{name_in, routed, Routed};
use super::rw::out_slice;
use super::{fail, in_shim, int, serve};
use crate::fdtable;
use crate::ops;
use crate::route::Found;

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::mkdir(f, mode),
        |p| real!(mkdir: fn(*const c_char, mode_t) -> c_int)(p, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    path_op!(
        dirfd,
        path,
        false,
        |f: &Found| ops::mkdir(f, mode),
        |p| real!(mkdirat: fn(c_int, *const c_char, mode_t) -> c_int)(dirfd, p, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    path_op!(
        dirfd,
        path,
        false,
        |f: &Found| ops::mknod(f, mode, dev),
        |p| real!(mknodat: fn(c_int, *const c_char, mode_t, libc::dev_t) -> c_int)(
            dirfd, p, mode, dev
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mknodat(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mknodat(dirfd, path, mode | libc::S_IFIFO, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    let last = unsafe { bytes(path) }.map(ops::last_component);
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::rmdir_named(f, last.unwrap_or_default()),
        |p| real!(rmdir: fn(*const c_char) -> c_int)(p)
    )
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        ops::unlink,
        |p| real!(unlink: fn(*const c_char) -> c_int)(p)
    )
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & libc::AT_REMOVEDIR == 0 {
        if let Some((dir, name)) = unsafe { name_in(dirfd, path) } {
            match serve(|| ops::unlink_in(&dir, name)) {
                Ok(true) => return 0,
                Ok(false) => {} // the full route below
                Err(e) => return fail(e),
            }
        }
    }
    let last = unsafe { bytes(path) }.map(ops::last_component);
    let ours = |f: &Found| {
        if flags & libc::AT_REMOVEDIR != 0 {
            ops::rmdir_named(f, last.unwrap_or_default())
        } else {
            ops::unlink(f)
        }
    };
    path_op!(
        dirfd,
        path,
        false,
        ours,
        |p| real!(unlinkat: fn(c_int, *const c_char, c_int) -> c_int)(dirfd, p, flags)
    )
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    unsafe { symlinkat(target, libc::AT_FDCWD, path) }
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    let Some(t) = (unsafe { bytes(target) }) else {
        return fail(Errno(libc::EFAULT));
    };
    if t.len() >= libc::PATH_MAX as usize {
        return fail(Errno(libc::ENAMETOOLONG)); // checked by the kernel before the new name
    }
    path_op!(
        dirfd,
        path,
        false,
        |f: &Found| ops::symlink(t, f),
        |p| real!(symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int)(target, dirfd, p)
    )
}

unsafe fn readlink_at(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    match unsafe { routed(dirfd, path, false) } {
        Routed::Kernel(k) => unsafe {
            real!(readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t)(
                dirfd,
                Routed::kernel_path(&k, path),
                buf,
                size,
            )
        },
        Routed::Ours(f) => match serve(|| ops::readlink(&f)) {
            Ok(target) => {
                let n = target.len().min(size);
                unsafe { out_slice(buf.cast(), n) }.copy_from_slice(&target[..n]);
                n as ssize_t
            }
            Err(e) => fail(e) as ssize_t,
        },
        Routed::Err(e) => fail(e) as ssize_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t {
    unsafe { readlink_at(libc::AT_FDCWD, path, buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    unsafe { readlink_at(dirfd, path, buf, size) }
}

/// The calls of two paths, which resolve them in different orders.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TwoPathCall {
    /// Both paths' directories, then the first one's last component.
    Rename,
    /// The first path whole (its last symlink followed with `follow`), then the second.
    Link { follow: bool },
}

/// Two paths: both noseFS's, both the kernel's, or EXDEV.
unsafe fn two_paths(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    call: TwoPathCall,
    ours: impl FnOnce(&Found, &Found) -> Result<(), Errno>,
    kernel: impl FnOnce(*const c_char, *const c_char) -> c_int,
) -> c_int {
    if unsafe { bytes(p1).is_none() } {
        return fail(Errno(libc::EFAULT)); // what the kernel answers
    }
    let a = unsafe { routed(d1, p1, call == TwoPathCall::Link { follow: true }) };
    if unsafe { bytes(p2).is_none() } {
        // The kernel reads the second path when it resolves it: after link's lookup of the
        // first (whose ENOENT comes first), after rename's of the first one's directory.
        return match a {
            Routed::Err(e) => fail(e),
            Routed::Ours(x) if call != TwoPathCall::Rename && x.attr.is_none() => {
                fail(Errno::ENOENT)
            }
            Routed::Kernel(x) => kernel(Routed::kernel_path(&x, p1), p2),
            Routed::Ours(_) => fail(Errno(libc::EFAULT)),
        };
    }
    let b = unsafe { routed(d2, p2, false) };
    match (a, b) {
        (Routed::Err(e), _) => fail(e),
        // link looks the old path up whole before the new one's directories (rename looks up
        // both directories first): a missing source is ENOENT whatever the target's path holds.
        (Routed::Ours(x), Routed::Err(_)) if call != TwoPathCall::Rename && x.attr.is_none() => {
            fail(Errno::ENOENT)
        }
        (_, Routed::Err(e)) => fail(e),
        (Routed::Ours(x), Routed::Ours(y)) => int(serve(|| ours(&x, &y))),
        (Routed::Kernel(x), Routed::Kernel(y)) => {
            kernel(Routed::kernel_path(&x, p1), Routed::kernel_path(&y, p2))
        }
        _ => fail(Errno(libc::EXDEV)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    unsafe { renameat2(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
) -> c_int {
    unsafe { renameat2(d1, from, d2, to, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    if let (Some(a), Some(b)) = unsafe { (name_in(d1, from), name_in(d2, to)) } {
        match serve(|| ops::rename_in((&a.0, a.1), (&b.0, b.1), flags)) {
            Ok(true) => return 0,
            Ok(false) => {} // the full route below
            Err(e) => return fail(e),
        }
    }
    unsafe {
        two_paths(
            d1,
            from,
            d2,
            to,
            TwoPathCall::Rename,
            |a, b| ops::rename(a, b, flags),
            |x, y| {
                real!(renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int)(
                    d1, x, d2, y, flags,
                )
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    unsafe { linkat(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(from) }.is_some_and(<[u8]>::is_empty);
    if empty && fdtable::is_ours(d1) && !in_shim() {
        // A name for an open noseFS file (O_TMPFILE's first): the new name must be ours too.
        return match unsafe { routed(d2, to, false) } {
            Routed::Ours(t) => int(serve(|| ops::flink(d1, &t))),
            Routed::Kernel(_) => fail(Errno(libc::EXDEV)),
            Routed::Err(e) => fail(e),
        };
    }
    unsafe {
        two_paths(
            d1,
            from,
            d2,
            to,
            TwoPathCall::Link { follow },
            ops::link,
            |x, y| {
                real!(linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int)(
                    d1, x, d2, y, flags,
                )
            },
        )
    }
}
