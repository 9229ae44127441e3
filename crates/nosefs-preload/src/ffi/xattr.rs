//! Extended attributes: get, list, set and remove, by path, by link and by descriptor.

use std::ffi::{c_char, c_int, c_void};

use libc::{size_t, ssize_t};
use nosefs_core::vfs;
use nosefs_core::Errno;

use super::pointers::bytes;
use super::routing::{routed, Routed};
use super::rw::{in_slice, out_slice};
use super::{fail, in_shim, int, serve};
use crate::fdtable;
use crate::ops;
use crate::route::Found;

/// What a get or list call returns in a caller's buffer: the length with `size` 0, ERANGE when
/// it does not fit, else the bytes copied.
unsafe fn xattr_out(result: Result<Vec<u8>, Errno>, buf: *mut c_void, size: size_t) -> ssize_t {
    match result {
        Ok(bytes) if size == 0 => bytes.len() as ssize_t,
        Ok(bytes) if bytes.len() > size => fail(Errno(libc::ERANGE)) as ssize_t,
        Ok(bytes) => {
            unsafe { out_slice(buf, bytes.len()) }.copy_from_slice(&bytes);
            bytes.len() as ssize_t
        }
        Err(e) => fail(e) as ssize_t,
    }
}

/// A name argument: EFAULT where the kernel would fault.
unsafe fn xattr_name<'a>(name: *const c_char) -> Result<&'a [u8], Errno> {
    unsafe { bytes(name) }.ok_or(Errno(libc::EFAULT))
}

/// A path-addressed get or list (`follow`: not the `l` form).
unsafe fn xattr_get_path(
    path: *const c_char,
    follow: bool,
    name: Option<*const c_char>,
    buf: *mut c_void,
    size: size_t,
    kernel: impl FnOnce(*const c_char) -> ssize_t,
) -> ssize_t {
    match unsafe { routed(libc::AT_FDCWD, path, follow) } {
        Routed::Kernel(k) => kernel(Routed::kernel_path(&k, path)),
        Routed::Ours(f) => {
            let result = serve(|| match name {
                Some(name) => ops::xattr(&f, vfs::XattrCall::Get(unsafe { xattr_name(name) }?)),
                None => ops::xattr(&f, vfs::XattrCall::List),
            });
            unsafe { xattr_out(result, buf, size) }
        }
        Routed::Err(e) => fail(e) as ssize_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, true, Some(name), value, size, |p| {
            real!(getxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t)(
                p, name, value, size,
            )
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn lgetxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, false, Some(name), value, size, |p| {
            real!(lgetxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t)(
                p, name, value, size,
            )
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let result = serve(|| ops::fxattr(fd, vfs::XattrCall::Get(unsafe { xattr_name(name) }?)));
        return unsafe { xattr_out(result, value, size) };
    }
    unsafe {
        real!(fgetxattr: fn(c_int, *const c_char, *mut c_void, size_t) -> ssize_t)(
            fd, name, value, size,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn listxattr(
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, true, None, list.cast(), size, |p| {
            real!(listxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t)(p, list, size)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn llistxattr(
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, false, None, list.cast(), size, |p| {
            real!(llistxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t)(p, list, size)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let result = serve(|| ops::fxattr(fd, vfs::XattrCall::List));
        return unsafe { xattr_out(result, list.cast(), size) };
    }
    unsafe { real!(flistxattr: fn(c_int, *mut c_char, size_t) -> ssize_t)(fd, list, size) }
}

/// A set or remove call from its C arguments (`value` null for remove).
unsafe fn xattr_change<'a>(
    name: *const c_char,
    value: Option<(*const c_void, size_t)>,
    flags: c_int,
) -> Result<vfs::XattrCall<'a>, Errno> {
    let name = unsafe { xattr_name(name) }?;
    Ok(match value {
        Some((value, size)) => vfs::XattrCall::Set(name, unsafe { in_slice(value, size) }, flags),
        None => vfs::XattrCall::Remove(name),
    })
}

#[no_mangle]
pub unsafe extern "C" fn setxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| ops::xattr(f, unsafe {
            xattr_change(name, Some((value, size)), flags)
        }?)
        .map(drop),
        |p| real!(setxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int)(
            p, name, value, size, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn lsetxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::xattr(f, unsafe {
            xattr_change(name, Some((value, size)), flags)
        }?)
        .map(drop),
        |p| real!(lsetxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int)(
            p, name, value, size, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| {
            ops::fxattr(fd, unsafe {
                xattr_change(name, Some((value, size)), flags)
            }?)
            .map(drop)
        }));
    }
    unsafe {
        real!(fsetxattr: fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int)(
            fd, name, value, size, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn removexattr(path: *const c_char, name: *const c_char) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| ops::xattr(f, unsafe { xattr_change(name, None, 0) }?).map(drop),
        |p| real!(removexattr: fn(*const c_char, *const c_char) -> c_int)(p, name)
    )
}

#[no_mangle]
pub unsafe extern "C" fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::xattr(f, unsafe { xattr_change(name, None, 0) }?).map(drop),
        |p| real!(lremovexattr: fn(*const c_char, *const c_char) -> c_int)(p, name)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| {
            ops::fxattr(fd, unsafe { xattr_change(name, None, 0) }?).map(drop)
        }));
    }
    unsafe { real!(fremovexattr: fn(c_int, *const c_char) -> c_int)(fd, name) }
}
