//! io_uring in a process the shim serves, refused with the answer a kernel without it gives
//! (ENOSYS; liburing's set-up here, the raw call in `raw.rs`): its rings are shared with the
//! kernel, which sees only the placeholders of noseFS descriptors, and cannot be served here.
//! Programs fall back to ordinary calls (RocksDB, PostgreSQL; MariaDB to Linux AIO, which
//! `aio.rs` serves). Kernel files of the process lose it too: the rings cannot tell which
//! descriptors they will be given.

use std::ffi::{c_int, c_uint, c_void};

use libc::size_t;

use super::aio::serves_async_io;

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init(
    entries: c_uint,
    ring: *mut c_void,
    flags: c_uint,
) -> c_int {
    if serves_async_io() {
        return -libc::ENOSYS; // liburing answers a negative errno
    }
    unsafe {
        real!(io_uring_queue_init: fn(c_uint, *mut c_void, c_uint) -> c_int)(entries, ring, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init_params(
    entries: c_uint,
    ring: *mut c_void,
    params: *mut c_void,
) -> c_int {
    if serves_async_io() {
        return -libc::ENOSYS;
    }
    unsafe {
        real!(io_uring_queue_init_params: fn(c_uint, *mut c_void, *mut c_void) -> c_int)(
            entries, ring, params,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init_mem(
    entries: c_uint,
    ring: *mut c_void,
    params: *mut c_void,
    buf: *mut c_void,
    buf_size: size_t,
) -> c_int {
    if serves_async_io() {
        return -libc::ENOSYS;
    }
    unsafe {
        real!(io_uring_queue_init_mem: fn(c_uint, *mut c_void, *mut c_void, *mut c_void, size_t) -> c_int)(
            entries, ring, params, buf, buf_size,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_setup(entries: c_uint, params: *mut c_void) -> c_int {
    if serves_async_io() {
        return -libc::ENOSYS;
    }
    unsafe { real!(io_uring_setup: fn(c_uint, *mut c_void) -> c_int)(entries, params) }
}
