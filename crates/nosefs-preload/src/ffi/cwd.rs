//! Working directory.

use std::ffi::{c_char, c_int, CString};
use std::ptr::null_mut;

use libc::{gid_t, mode_t, size_t, uid_t};
use nosefs_core::Errno;

use super::routing::{routed, Routed};
use super::rw::out_slice;
use super::{fail, in_shim, int, serve, set_errno};
use crate::fdtable::{self, Kind};
use crate::ops;
use crate::route;
use crate::state;

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let real_chdir = real!(chdir: fn(*const c_char) -> c_int);
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => {
            let rc = unsafe { real_chdir(Routed::kernel_path(&k, path)) };
            if rc == 0 {
                route::set_cwd(None);
                route::forget_kernel_cwd();
            }
            rc
        }
        Routed::Ours(f) => {
            let rc = int(serve(|| ops::chdir(&f)));
            if rc == 0 {
                unsafe { trap_cwd() };
            }
            rc
        }
        Routed::Err(e) => fail(e),
    }
}

/// While the working directory is inside noseFS, the kernel's is the prefix directory.
unsafe fn trap_cwd() {
    if let Some(config) = state::config() {
        let chdir = real!(chdir: fn(*const c_char) -> c_int);
        // In daemon mode the kernel reaches the same directory through the FUSE mount, so
        // relative paths the shim does not see (exec, a static child) resolve there too.
        let same_in_kernel = route::cwd()
            .filter(|_| state::daemon_mode())
            .and_then(|cwd| CString::new(cwd).ok());
        let moved = same_in_kernel.is_some_and(|p| unsafe { chdir(p.as_ptr()) } == 0);
        if !moved {
            if let Ok(p) = CString::new(config.prefix.to_vec()) {
                unsafe { chdir(p.as_ptr()) };
            }
        }
        route::forget_kernel_cwd();
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        let rc = int(serve(|| {
            let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
            if file.kind == Kind::File {
                return Err(Errno::ENOTDIR);
            }
            let attr = ops::fstat(fd)?;
            if !attr.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            ops::may_search(fd, &attr)?;
            route::set_cwd(Some(file.path.clone()));
            Ok(())
        }));
        if rc == 0 {
            unsafe { trap_cwd() };
        }
        return rc;
    }
    let rc = unsafe { real!(fchdir: fn(c_int) -> c_int)(fd) };
    if rc == 0 {
        route::set_cwd(None);
        route::forget_kernel_cwd();
    }
    rc
}

/// Copies `path` out as getcwd does (allocating when `buf` is null).
unsafe fn give_path(path: &[u8], buf: *mut c_char, size: size_t) -> *mut c_char {
    let need = path.len() + 1;
    let out = if buf.is_null() {
        let alloc = if size == 0 { need } else { size };
        if alloc < need {
            set_errno(Errno(libc::ERANGE));
            return null_mut();
        }
        // SAFETY: plain allocation, freed by the caller with free().
        let p = unsafe { libc::malloc(alloc) }.cast::<c_char>();
        if p.is_null() {
            set_errno(Errno(libc::ENOMEM));
            return null_mut();
        }
        p
    } else {
        if size < need {
            set_errno(Errno(libc::ERANGE));
            return null_mut();
        }
        buf
    };
    let dst = unsafe { out_slice(out.cast(), need) };
    dst[..path.len()].copy_from_slice(path);
    dst[path.len()] = 0;
    out
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    if !in_shim() {
        if let Some(cwd) = route::cwd() {
            return unsafe { give_path(&cwd, buf, size) };
        }
    }
    unsafe { real!(getcwd: fn(*mut c_char, size_t) -> *mut c_char)(buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    unsafe { getcwd(null_mut(), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn getwd(buf: *mut c_char) -> *mut c_char {
    unsafe { getcwd(buf, libc::PATH_MAX as size_t) }
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char)(
                Routed::kernel_path(&k, path),
                resolved,
            )
        },
        Routed::Ours(f) => match f.existing() {
            Ok(_) => unsafe {
                give_path(
                    &f.path,
                    resolved,
                    if resolved.is_null() {
                        0
                    } else {
                        libc::PATH_MAX as size_t
                    },
                )
            },
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        },
        Routed::Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    unsafe { realpath(path, null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = unsafe { real!(umask: fn(mode_t) -> mode_t)(mask) };
    state::set_umask(mask);
    old
}

// Credentials change: forget the cached ones, and in daemon mode have the daemon read them
// again (it checks every request against them).
macro_rules! cred_hook {
    ($name:ident ( $($arg:ident : $ty:ty),* )) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let rc = unsafe { real!($name: fn($($ty),*) -> c_int)($($arg),*) };
            if rc == 0 && !in_shim() {
                let _ = serve(|| {
                    state::credentials_changed();
                    Ok(())
                });
            }
            rc
        }
    };
}

cred_hook!(setuid(uid: uid_t));
cred_hook!(seteuid(uid: uid_t));
cred_hook!(setreuid(r: uid_t, e: uid_t));
cred_hook!(setresuid(r: uid_t, e: uid_t, s: uid_t));
cred_hook!(setgid(gid: gid_t));
cred_hook!(setegid(gid: gid_t));
cred_hook!(setregid(r: gid_t, e: gid_t));
cred_hook!(setresgid(r: gid_t, e: gid_t, s: gid_t));
cred_hook!(setgroups(n: size_t, list: *const gid_t));
