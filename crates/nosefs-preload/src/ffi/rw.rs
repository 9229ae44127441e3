//! Reading and writing.

use std::ffi::{c_char, c_int, c_uint, c_void};

use libc::{off64_t, off_t, size_t, ssize_t};
use nosefs_core::Errno;

use super::routing::{routed, Routed};
use super::{fail, in_shim, int, serve, value};
use crate::fdtable;
use crate::ops;

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let buf = unsafe { out_slice(buf, count) };
        return value(serve(|| ops::read(fd, buf))) as ssize_t;
    }
    unsafe { real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    _buflen: size_t,
) -> ssize_t {
    unsafe { read(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let data = unsafe { in_slice(buf, count) };
        return value(serve(|| ops::write(fd, data))) as ssize_t;
    }
    unsafe { real!(write: fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    unsafe { pread64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off64_t,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let buf = unsafe { out_slice(buf, count) };
        return value(serve(|| ops::pread(fd, buf, offset))) as ssize_t;
    }
    unsafe {
        real!(pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t)(fd, buf, count, offset)
    }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off_t,
    _l: size_t,
) -> ssize_t {
    unsafe { pread64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off64_t,
    _l: size_t,
) -> ssize_t {
    unsafe { pread64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    unsafe { pwrite64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off64_t,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let data = unsafe { in_slice(buf, count) };
        return value(serve(|| ops::pwrite(fd, data, offset))) as ssize_t;
    }
    unsafe {
        real!(pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t)(
            fd, buf, count, offset,
        )
    }
}

pub(super) unsafe fn out_slice<'a>(buf: *mut c_void, count: size_t) -> &'a mut [u8] {
    if count == 0 || buf.is_null() {
        return &mut [];
    }
    // SAFETY: the caller passes a buffer of `count` writable bytes (read(2)'s contract).
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), count) }
}

pub(super) unsafe fn in_slice<'a>(buf: *const c_void, count: size_t) -> &'a [u8] {
    if count == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: the caller passes `count` readable bytes (write(2)'s contract).
    unsafe { std::slice::from_raw_parts(buf.cast(), count) }
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> Result<&'a [libc::iovec], Errno> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(Errno::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller passes `n` iovec structures.
    Ok(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

/// Gathers a writev's buffers into one, so the write stays one operation (one append).
unsafe fn gather(iov: &[libc::iovec]) -> Vec<u8> {
    let mut data = Vec::with_capacity(iov.iter().map(|v| v.iov_len).sum());
    for v in iov {
        data.extend_from_slice(unsafe { in_slice(v.iov_base, v.iov_len) });
    }
    data
}

/// Scatters `read(buf)` into the iovecs: reads into one buffer, then copies out.
unsafe fn scatter(
    iov: &[libc::iovec],
    read: impl FnOnce(&mut [u8]) -> Result<usize, Errno>,
) -> Result<usize, Errno> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut data = vec![0u8; total];
    let n = read(&mut data)?;
    let mut at = 0;
    for v in iov {
        if at >= n {
            break;
        }
        let take = v.iov_len.min(n - at);
        unsafe { out_slice(v.iov_base, take) }.copy_from_slice(&data[at..at + take]);
        at += take;
    }
    Ok(n)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return value(serve(|| unsafe {
            scatter(iovecs(iov, n)?, |b| ops::read(fd, b))
        })) as ssize_t;
    }
    unsafe { real!(readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, n) }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return value(serve(|| unsafe {
            ops::write(fd, &gather(iovecs(iov, n)?))
        })) as ssize_t;
    }
    unsafe { real!(writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, n) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
    flags: c_int,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, flags, true) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, flags, true) }
}

unsafe fn preadv_any(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
    v2: bool,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        // Offset -1 (preadv2) means "at the file offset".
        let r = serve(|| unsafe {
            scatter(iovecs(iov, n)?, |b| {
                if offset == -1 {
                    ops::read(fd, b)
                } else {
                    ops::pread(fd, b, offset)
                }
            })
        });
        return value(r) as ssize_t;
    }
    if v2 {
        unsafe {
            real!(preadv64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t)(
                fd, iov, n, offset, flags,
            )
        }
    } else {
        unsafe {
            real!(preadv64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t)(
                fd, iov, n, offset,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
    flags: c_int,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, flags, true) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, flags, true) }
}

unsafe fn pwritev_any(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
    v2: bool,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let r = serve(|| unsafe {
            let data = gather(iovecs(iov, n)?);
            if offset == -1 {
                ops::write(fd, &data)
            } else {
                ops::pwrite(fd, &data, offset)
            }
        });
        return value(r) as ssize_t;
    }
    if v2 {
        unsafe {
            real!(pwritev64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t)(
                fd, iov, n, offset, flags,
            )
        }
    } else {
        unsafe {
            real!(pwritev64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t)(
                fd, iov, n, offset,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, offset: off_t, whence: c_int) -> off_t {
    unsafe { lseek64(fd, offset, whence) }
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, offset: off64_t, whence: c_int) -> off64_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return value(serve(|| ops::lseek(fd, offset, whence)));
    }
    unsafe { real!(lseek64: fn(c_int, off64_t, c_int) -> off64_t)(fd, offset, whence) }
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fsync(fd)));
    }
    unsafe { real!(fsync: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fsync(fd)));
    }
    unsafe { real!(fdatasync: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(
    fd: c_int,
    offset: off64_t,
    n: off64_t,
    flags: c_uint,
) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fsync(fd)));
    }
    unsafe {
        real!(sync_file_range: fn(c_int, off64_t, off64_t, c_uint) -> c_int)(fd, offset, n, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(ops::sync_all));
    }
    unsafe { real!(syncfs: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn sync() {
    if !in_shim() {
        let _ = serve(ops::sync_all);
    }
    unsafe { real!(sync: fn() -> ())() }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, size: off_t) -> c_int {
    unsafe { ftruncate64(fd, size) }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, size: off64_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::ftruncate(fd, size)));
    }
    unsafe { real!(ftruncate64: fn(c_int, off64_t) -> c_int)(fd, size) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, size: off_t) -> c_int {
    unsafe { truncate64(path, size) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, size: off64_t) -> c_int {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(truncate64: fn(*const c_char, off64_t) -> c_int)(
                Routed::kernel_path(&k, path),
                size,
            )
        },
        Routed::Ours(f) => int(serve(|| ops::truncate(&f, size))),
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int {
    unsafe { fallocate64(fd, mode, offset, len) }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(
    fd: c_int,
    mode: c_int,
    offset: off64_t,
    len: off64_t,
) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fallocate(fd, mode, offset, len)));
    }
    unsafe {
        real!(fallocate64: fn(c_int, c_int, off64_t, off64_t) -> c_int)(fd, mode, offset, len)
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, offset: off_t, len: off_t) -> c_int {
    unsafe { posix_fallocate64(fd, offset, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, offset: off64_t, len: off64_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        // posix_fallocate returns the error number instead of setting errno.
        return match serve(|| ops::fallocate(fd, 0, offset, len)) {
            Ok(()) => 0,
            Err(e) => e.0,
        };
    }
    unsafe { real!(posix_fallocate64: fn(c_int, off64_t, off64_t) -> c_int)(fd, offset, len) }
}

#[no_mangle]
pub unsafe extern "C" fn readahead(fd: c_int, offset: off64_t, count: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::readahead(fd))) as ssize_t;
    }
    unsafe { real!(readahead: fn(c_int, off64_t, size_t) -> ssize_t)(fd, offset, count) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(
    fd: c_int,
    offset: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    if fdtable::is_ours(fd) {
        return 0;
    }
    unsafe {
        real!(posix_fadvise: fn(c_int, off_t, off_t, c_int) -> c_int)(fd, offset, len, advice)
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    offset: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    unsafe { posix_fadvise(fd, offset, len, advice) }
}
