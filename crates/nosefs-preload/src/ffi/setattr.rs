//! chmod, chown and times, by path and by descriptor.

use std::ffi::{c_char, c_int};

use libc::{gid_t, mode_t, uid_t};
use nosefs_core::namespace::SetAttr;
use nosefs_core::Errno;

use super::pointers::bytes;
use super::{in_shim, int, serve};
use crate::fdtable;
use crate::ops;
use crate::route::Found;

fn chmod_change(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    }
}

fn chown_change(uid: uid_t, gid: gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

fn setattr_found(f: &Found, change: &SetAttr, now: bool) -> Result<(), Errno> {
    ops::setattr(f, change, now)
}

fn setattr_fd(fd: c_int, change: &SetAttr, now: bool) -> Result<(), Errno> {
    ops::fsetattr(fd, change, now)
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| setattr_found(f, &chmod_change(mode), false),
        |p| real!(chmod: fn(*const c_char, mode_t) -> c_int)(p, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    path_op!(
        dirfd,
        path,
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        |f: &Found| setattr_found(f, &chmod_change(mode), false),
        |p| real!(fchmodat: fn(c_int, *const c_char, mode_t, c_int) -> c_int)(
            dirfd, p, mode, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| setattr_fd(fd, &chmod_change(mode), false)));
    }
    unsafe { real!(fchmod: fn(c_int, mode_t) -> c_int)(fd, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| setattr_found(f, &chown_change(uid, gid), false),
        |p| real!(chown: fn(*const c_char, uid_t, gid_t) -> c_int)(p, uid, gid)
    )
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| setattr_found(f, &chown_change(uid, gid), false),
        |p| real!(lchown: fn(*const c_char, uid_t, gid_t) -> c_int)(p, uid, gid)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_some_and(<[u8]>::is_empty);
    if empty && fdtable::is_ours(dirfd) && !in_shim() {
        return int(serve(|| setattr_fd(dirfd, &chown_change(uid, gid), false)));
    }
    path_op!(
        dirfd,
        path,
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        |f: &Found| setattr_found(f, &chown_change(uid, gid), false),
        |p| real!(fchownat: fn(c_int, *const c_char, uid_t, gid_t, c_int) -> c_int)(
            dirfd, p, uid, gid, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| setattr_fd(fd, &chown_change(uid, gid), false)));
    }
    unsafe { real!(fchown: fn(c_int, uid_t, gid_t) -> c_int)(fd, uid, gid) }
}

/// A utimensat argument as a change, and whether it only sets "now" (which write permission
/// allows).
unsafe fn times_change(times: *const libc::timespec) -> Result<(SetAttr, bool), Errno> {
    let now = nosefs_core::mkfs::now_ns();
    if times.is_null() {
        let change = SetAttr {
            atime_ns: Some(now),
            mtime_ns: Some(now),
            ..SetAttr::default()
        };
        return Ok((change, true));
    }
    // SAFETY: utimensat takes two timespecs.
    let t = unsafe { std::slice::from_raw_parts(times, 2) };
    let mut only_now = true;
    let mut pick = |ts: &libc::timespec| -> Result<Option<i64>, Errno> {
        match ts.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now)),
            n if (0..1_000_000_000).contains(&n) => {
                only_now = false;
                Ok(Some(
                    ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(n),
                ))
            }
            _ => Err(Errno::EINVAL),
        }
    };
    let change = SetAttr {
        atime_ns: pick(&t[0])?,
        mtime_ns: pick(&t[1])?,
        ..SetAttr::default()
    };
    Ok((change, only_now))
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // Linux's futimens(fd) form.
        if fdtable::is_ours(dirfd) && !in_shim() {
            return unsafe { futimens(dirfd, times) };
        }
        return unsafe {
            real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int)(
                dirfd, path, times, flags,
            )
        };
    }
    let ours = |f: &Found| {
        let (change, now) = unsafe { times_change(times) }?;
        setattr_found(f, &change, now)
    };
    path_op!(
        dirfd,
        path,
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        ours,
        |p| real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int)(
            dirfd, p, times, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| {
            let (change, now) = unsafe { times_change(times) }?;
            setattr_fd(fd, &change, now)
        }));
    }
    unsafe { real!(futimens: fn(c_int, *const libc::timespec) -> c_int)(fd, times) }
}

unsafe fn timevals(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    (!tv.is_null()).then(|| {
        // SAFETY: utimes takes two timevals.
        let t = unsafe { std::slice::from_raw_parts(tv, 2) };
        [t[0], t[1]].map(|v| libc::timespec {
            tv_sec: v.tv_sec,
            tv_nsec: v.tv_usec * 1000,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe {
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe {
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe { futimens(fd, ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr())) }
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe {
        utimensat(
            dirfd,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    let ts = (!times.is_null()).then(|| {
        // SAFETY: the caller passes a utimbuf.
        let t = unsafe { &*times };
        [
            libc::timespec {
                tv_sec: t.actime,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: t.modtime,
                tv_nsec: 0,
            },
        ]
    });
    unsafe {
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}
