//! stdio: noseFS files as fopencookie streams.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use libc::{off64_t, size_t, ssize_t};
use nosefs_core::Errno;

use super::fds::dup2;
use super::open::close;
use super::pointers::bytes;
use super::routing::{routed, Routed};
use super::rw::{lseek64, read, write};
use super::{in_shim, serve, set_errno};
use crate::fdtable;
use crate::ops;

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// Offset of `_fileno` in glibc's `struct _IO_FILE` (public in <bits/types/struct_FILE.h>):
/// `int _flags`, twelve pointers, `_chain`, then `_fileno`.
const FILE_FILENO_OFFSET: usize = 112;

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, size: size_t) -> ssize_t {
    unsafe { read(cookie as usize as c_int, buf.cast(), size) }
}

unsafe extern "C" fn cookie_write(
    cookie: *mut c_void,
    buf: *const c_char,
    size: size_t,
) -> ssize_t {
    let n = unsafe { write(cookie as usize as c_int, buf.cast(), size) };
    // fopencookie treats a short write or -1 as an error either way; 0 must not be returned.
    if n < 0 {
        -1
    } else {
        n
    }
}

unsafe extern "C" fn cookie_seek(
    cookie: *mut c_void,
    offset: *mut off64_t,
    whence: c_int,
) -> c_int {
    // SAFETY: glibc passes a valid offset pointer.
    let at = unsafe { lseek64(cookie as usize as c_int, *offset, whence) };
    if at < 0 {
        return -1;
    }
    unsafe { *offset = at };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    unsafe { close(cookie as usize as c_int) }
}

/// A stdio stream over noseFS descriptor `fd`; `fileno` reports `fd`.
unsafe fn cookie_stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    let stream = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !stream.is_null() {
        // SAFETY: glibc's FILE layout; `_fileno` of a cookie stream is -1 otherwise, which would
        // make fileno() fail for programs that fstat their streams.
        unsafe { *stream.cast::<u8>().add(FILE_FILENO_OFFSET).cast::<c_int>() = fd };
    }
    stream
}

extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Which of descriptors 0-2 already have their standard stream replaced.
static STD_STREAM_SWAPPED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
/// glibc's own standard streams that were replaced (programs may have kept the pointers).
static STD_STREAM_ORIGINAL: [AtomicPtr<libc::FILE>; 3] = [const { AtomicPtr::new(null_mut()) }; 3];

/// Descriptor 0, 1 or 2 now names a noseFS file (an exec handed it over, or a program `dup2`'d
/// onto it, as `sort -o` and shells do). glibc's own stdin/stdout/stderr reach the kernel through
/// internal calls the shim never sees, so the standard stream is replaced, once, by a cookie
/// stream on the same descriptor, whose calls go through the shim's hooks (and to the kernel again
/// if the descriptor later stops being noseFS's). Data the old stream still buffered is dropped;
/// programs flush before they redirect.
pub fn std_stream_became_ours(fd: c_int) {
    let Some(swapped) = usize::try_from(fd)
        .ok()
        .and_then(|i| STD_STREAM_SWAPPED.get(i))
    else {
        return;
    };
    if swapped.swap(true, Ordering::AcqRel) {
        return;
    }
    let mode: &[u8] = if fd == 0 { b"r\0" } else { b"w\0" };
    // SAFETY: `cookie_stream` takes a NUL-terminated mode; the standard stream globals are plain
    // pointers glibc reads at every use, and this runs once per descriptor.
    unsafe {
        let stream = cookie_stream(fd, mode.as_ptr().cast());
        if stream.is_null() {
            swapped.store(false, Ordering::Release);
            return;
        }
        let original = match fd {
            0 => std::mem::replace(&mut *std::ptr::addr_of_mut!(stdin), stream),
            1 => std::mem::replace(&mut *std::ptr::addr_of_mut!(stdout), stream),
            _ => {
                libc::setvbuf(stream, null_mut(), libc::_IONBF, 0);
                std::mem::replace(&mut *std::ptr::addr_of_mut!(stderr), stream)
            }
        };
        STD_STREAM_ORIGINAL[fd as usize].store(original, Ordering::Release);
    }
}

/// open(2) flags for an fopen mode string.
fn fopen_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut flags = match mode.first()? {
        b'r' if plus => libc::O_RDWR,
        b'r' => libc::O_RDONLY,
        b'w' if plus => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' if plus => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if mode.contains(&b'x') {
        flags |= libc::O_EXCL;
    }
    if mode.contains(&b'e') {
        flags |= libc::O_CLOEXEC;
    }
    Some(flags)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let flags = unsafe { bytes(mode) }.and_then(fopen_flags);
    let follow = flags.is_some_and(|f| f & libc::O_EXCL == 0);
    match unsafe { routed(libc::AT_FDCWD, path, follow) } {
        Routed::Kernel(k) => unsafe {
            real!(fopen: fn(*const c_char, *const c_char) -> *mut libc::FILE)(
                Routed::kernel_path(&k, path),
                mode,
            )
        },
        Routed::Ours(f) => {
            let Some(flags) = flags else {
                set_errno(Errno::EINVAL);
                return null_mut();
            };
            match serve(|| ops::open(&f, flags, 0o666)) {
                Ok(fd) => {
                    let stream = unsafe { cookie_stream(fd, mode) };
                    if stream.is_null() {
                        unsafe { close(fd) };
                    }
                    stream
                }
                Err(e) => {
                    set_errno(e);
                    null_mut()
                }
            }
        }
        Routed::Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    unsafe { fopen(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { cookie_stream(fd, mode) };
    }
    unsafe { real!(fdopen: fn(c_int, *const c_char) -> *mut libc::FILE)(fd, mode) }
}

/// The standard descriptor (0-2) whose stream `stream` is, now or before the shim replaced it.
fn std_stream_fd(stream: *mut libc::FILE) -> Option<c_int> {
    // SAFETY: reading the standard stream pointers, which glibc initialises before any code runs.
    let current = unsafe { [stdin, stdout, stderr] };
    (0..3)
        .find(|&i| current[i] == stream || STD_STREAM_ORIGINAL[i].load(Ordering::Acquire) == stream)
        .map(|i| i as c_int)
}

/// `freopen` onto a noseFS path. A standard stream keeps its descriptor number (the new file is
/// `dup2`'d onto it, as glibc does) and becomes the shim's stream for it, which the global
/// `stdin`/`stdout`/`stderr` name from then on; any other stream is closed and a new one returned
/// (a program that ignores freopen's result and keeps the old pointer for a non-standard stream
/// is not served).
#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    let real = real!(freopen: fn(*const c_char, *const c_char, *mut libc::FILE) -> *mut libc::FILE);
    if path.is_null() || in_shim() {
        return unsafe { real(path, mode, stream) };
    }
    let flags = unsafe { bytes(mode) }.and_then(fopen_flags);
    let follow = flags.is_some_and(|f| f & libc::O_EXCL == 0);
    let found = match unsafe { routed(libc::AT_FDCWD, path, follow) } {
        Routed::Kernel(k) => return unsafe { real(Routed::kernel_path(&k, path), mode, stream) },
        Routed::Err(e) => {
            set_errno(e);
            return null_mut();
        }
        Routed::Ours(f) => f,
    };
    let Some(flags) = flags else {
        set_errno(Errno::EINVAL);
        return null_mut();
    };
    // SAFETY: `stream` is the caller's open stream; flushing it first is what freopen does.
    unsafe { libc::fflush(stream) };
    let fd = match serve(|| ops::open(&found, flags, 0o666)) {
        Ok(fd) => fd,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    match std_stream_fd(stream) {
        Some(std_fd) => {
            // SAFETY: both descriptors are valid; the hooks keep the shim's table in step.
            let rc = unsafe { dup2(fd, std_fd) };
            unsafe { close(fd) };
            if rc < 0 {
                return null_mut();
            }
            std_stream_became_ours(std_fd);
            // SAFETY: reading the standard stream pointer just set.
            unsafe { [stdin, stdout, stderr][std_fd as usize] }
        }
        None => {
            // SAFETY: the caller gives the old stream up to freopen.
            unsafe { libc::fclose(stream) };
            let new = unsafe { cookie_stream(fd, mode) };
            if new.is_null() {
                unsafe { close(fd) };
            }
            new
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    unsafe { freopen(path, mode, stream) }
}
