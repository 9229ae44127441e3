//! Attributes.

use std::ffi::{c_char, c_int, c_uint};

use nosefs_core::namespace::Attr;
use nosefs_core::Errno;

use super::pointers::bytes;
use super::routing::{routed, Routed};
use super::{fail, in_shim, int, serve, set_errno};
use crate::fdtable;
use crate::ops;

/// The device number noseFS files report (major 0, like other virtual file systems).
const DEV_MINOR: u32 = 0x6e6f;

fn fill_stat(attr: &Attr, st: &mut libc::stat) {
    st.st_dev = libc::makedev(0, DEV_MINOR);
    st.st_ino = attr.ino;
    st.st_nlink = u64::from(attr.nlink);
    st.st_mode = attr.mode;
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    st.st_rdev = u64::from(attr.rdev);
    st.st_size = attr.size as i64;
    st.st_blksize = 4096;
    st.st_blocks = attr.blocks as i64;
    st.st_atime = attr.atime_ns.div_euclid(1_000_000_000);
    st.st_atime_nsec = attr.atime_ns.rem_euclid(1_000_000_000);
    st.st_mtime = attr.mtime_ns.div_euclid(1_000_000_000);
    st.st_mtime_nsec = attr.mtime_ns.rem_euclid(1_000_000_000);
    st.st_ctime = attr.ctime_ns.div_euclid(1_000_000_000);
    st.st_ctime_nsec = attr.ctime_ns.rem_euclid(1_000_000_000);
}

unsafe fn put_stat(r: Result<Attr, Errno>, buf: *mut libc::stat) -> c_int {
    match r {
        Ok(attr) if !buf.is_null() => {
            // SAFETY: the caller passes a struct stat to fill.
            let st = unsafe { &mut *buf };
            // SAFETY: struct stat is plain data; all-zero is a valid value.
            *st = unsafe { std::mem::zeroed() };
            fill_stat(&attr, st);
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

unsafe fn stat_at(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_some_and(<[u8]>::is_empty);
    if empty && fdtable::is_ours(dirfd) && !in_shim() {
        return unsafe { put_stat(serve(|| ops::fstat(dirfd)), buf) };
    }
    if !empty {
        match unsafe { routed(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
            Routed::Kernel(Some(k)) => {
                return unsafe {
                    real!(fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
                        dirfd,
                        k.as_ptr(),
                        buf,
                        flags,
                    )
                }
            }
            Routed::Kernel(None) => {}
            Routed::Ours(f) => return unsafe { put_stat(serve(|| ops::stat(&f)), buf) },
            Routed::Err(e) => return fail(e),
        }
    }
    unsafe {
        real!(fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
            dirfd, path, buf, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { put_stat(serve(|| ops::fstat(fd)), buf) };
    }
    unsafe { real!(fstat: fn(c_int, *mut libc::stat) -> c_int)(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, buf) }
}

// The glibc < 2.33 ABI: programs built against older glibc call these.
#[no_mangle]
pub unsafe extern "C" fn __xstat(_ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __xstat64(
    _ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(_ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    _ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

fn statx_time(ns: i64) -> libc::statx_timestamp {
    // SAFETY: plain data; all-zero is valid.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = ns.div_euclid(1_000_000_000);
    t.tv_nsec = ns.rem_euclid(1_000_000_000) as u32;
    t
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_some_and(<[u8]>::is_empty);
    let attr = if empty && fdtable::is_ours(dirfd) && !in_shim() {
        serve(|| ops::fstat(dirfd))
    } else if empty {
        return unsafe {
            real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int)(
                dirfd, path, flags, mask, buf,
            )
        };
    } else {
        match unsafe { routed(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
            Routed::Kernel(k) => {
                let f = real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int);
                return unsafe { f(dirfd, Routed::kernel_path(&k, path), flags, mask, buf) };
            }
            Routed::Ours(f) => serve(|| ops::stat(&f)),
            Routed::Err(e) => return fail(e),
        }
    };
    match attr {
        Ok(a) if !buf.is_null() => {
            // SAFETY: the caller passes a struct statx to fill; all-zero is a valid value.
            let sx = unsafe { &mut *buf };
            *sx = unsafe { std::mem::zeroed() };
            sx.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
            sx.stx_blksize = 4096;
            sx.stx_nlink = a.nlink;
            sx.stx_uid = a.uid;
            sx.stx_gid = a.gid;
            sx.stx_mode = a.mode as u16;
            sx.stx_ino = a.ino;
            sx.stx_size = a.size;
            sx.stx_blocks = a.blocks;
            sx.stx_atime = statx_time(a.atime_ns);
            sx.stx_btime = statx_time(a.ctime_ns);
            sx.stx_ctime = statx_time(a.ctime_ns);
            sx.stx_mtime = statx_time(a.mtime_ns);
            sx.stx_rdev_major = libc::major(u64::from(a.rdev));
            sx.stx_rdev_minor = libc::minor(u64::from(a.rdev));
            sx.stx_dev_major = 0;
            sx.stx_dev_minor = DEV_MINOR;
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

const NOSEFS_MAGIC: i64 = 0x6e6f_7365;

unsafe fn put_statfs(buf: *mut libc::statfs) -> c_int {
    match serve(ops::statfs) {
        Ok((blocks, free, files, ffree)) if !buf.is_null() => {
            // SAFETY: the caller passes a struct statfs; all-zero is valid.
            let s = unsafe { &mut *buf };
            *s = unsafe { std::mem::zeroed() };
            s.f_type = NOSEFS_MAGIC;
            s.f_bsize = 4096;
            s.f_blocks = blocks;
            s.f_bfree = free;
            s.f_bavail = free;
            s.f_files = files;
            s.f_ffree = ffree;
            s.f_namelen = 255;
            s.f_frsize = 4096;
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(statfs: fn(*const c_char, *mut libc::statfs) -> c_int)(
                Routed::kernel_path(&k, path),
                buf,
            )
        },
        Routed::Ours(f) => match f.existing() {
            Ok(_) => unsafe { put_statfs(buf) },
            Err(e) => fail(e),
        },
        Routed::Err(e) => fail(e),
    }
}

/// `pathconf`/`fpathconf` values for noseFS (glibc computes them from an internal statfs the
/// shim never sees). EINVAL for a name that has no limit here, as the kernel's file systems do.
fn conf_value(name: c_int) -> Result<libc::c_long, Errno> {
    use nosefs_core::format::pinode::NAME_MAX;
    Ok(match name {
        libc::_PC_NAME_MAX => NAME_MAX as libc::c_long,
        libc::_PC_PATH_MAX => libc::PATH_MAX as libc::c_long,
        libc::_PC_LINK_MAX => nosefs_core::namespace::LINK_MAX as libc::c_long,
        libc::_PC_SYMLINK_MAX => nosefs_core::namespace::SYMLINK_MAX as libc::c_long,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_NO_TRUNC | libc::_PC_CHOWN_RESTRICTED | libc::_PC_2_SYMLINKS => 1,
        libc::_PC_PIPE_BUF => 4096,
        libc::_PC_MAX_CANON | libc::_PC_MAX_INPUT => 255,
        libc::_PC_VDISABLE => 0,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => 4096,
        _ => return Err(Errno::EINVAL),
    })
}

fn conf_result(r: Result<libc::c_long, Errno>) -> libc::c_long {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

#[no_mangle]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> libc::c_long {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(pathconf: fn(*const c_char, c_int) -> libc::c_long)(
                Routed::kernel_path(&k, path),
                name,
            )
        },
        Routed::Ours(f) => conf_result(f.existing().and_then(|_| conf_value(name))),
        Routed::Err(e) => conf_result(Err(e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fpathconf(fd: c_int, name: c_int) -> libc::c_long {
    if fdtable::is_ours(fd) && !in_shim() {
        return conf_result(conf_value(name));
    }
    unsafe { real!(fpathconf: fn(c_int, c_int) -> libc::c_long)(fd, name) }
}

#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    unsafe { statfs(path, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { put_statfs(buf) };
    }
    unsafe { real!(fstatfs: fn(c_int, *mut libc::statfs) -> c_int)(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int {
    unsafe { fstatfs(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(statvfs: fn(*const c_char, *mut libc::statvfs) -> c_int)(
                Routed::kernel_path(&k, path),
                buf,
            )
        },
        Routed::Ours(_) => unsafe { put_statvfs(buf) },
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    unsafe { statvfs(path, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { put_statvfs(buf) };
    }
    unsafe { real!(fstatvfs: fn(c_int, *mut libc::statvfs) -> c_int)(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    unsafe { fstatvfs(fd, buf) }
}

unsafe fn put_statvfs(buf: *mut libc::statvfs) -> c_int {
    match serve(ops::statfs) {
        Ok((blocks, free, files, ffree)) if !buf.is_null() => {
            // SAFETY: the caller passes a struct statvfs; all-zero is valid.
            let s = unsafe { &mut *buf };
            *s = unsafe { std::mem::zeroed() };
            s.f_bsize = 4096;
            s.f_frsize = 4096;
            s.f_blocks = blocks;
            s.f_bfree = free;
            s.f_bavail = free;
            s.f_files = files;
            s.f_ffree = ffree;
            s.f_favail = ffree;
            s.f_fsid = u64::from(DEV_MINOR);
            s.f_namemax = 255;
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

unsafe fn access_at(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    match unsafe { routed(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
        Routed::Kernel(k) => unsafe {
            real!(faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int)(
                dirfd,
                Routed::kernel_path(&k, path),
                mode,
                flags,
            )
        },
        Routed::Ours(f) => int(serve(|| ops::access(&f, mode))),
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    unsafe { access_at(libc::AT_FDCWD, path, mode, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { access_at(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { access_at(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    unsafe { access_at(dirfd, path, mode, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat2(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    unsafe { access_at(dirfd, path, mode, flags) }
}
