//! Asynchronous I/O, refused: io_uring (through liburing) and Linux AIO (through libaio) hand
//! requests to the kernel, which sees only the placeholders of noseFS descriptors: a read or
//! write submitted there would fail, or wait for ever, and nothing reaches noseFS. A process that
//! serves noseFS is told these interfaces are missing, with the answer a kernel without them
//! gives (ENOSYS), and programs fall back to ordinary calls (MariaDB's InnoDB: innodb_use_native_aio
//! off; RocksDB and PostgreSQL: synchronous I/O). Kernel files of the process lose them too: the
//! rings cannot tell which descriptors they will be given.

use std::ffi::{c_int, c_uint, c_void};

use libc::size_t;

use crate::state;

/// Whether asynchronous-I/O set-up is refused in this process.
fn async_io_refused() -> bool {
    state::config().is_some()
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init(
    entries: c_uint,
    ring: *mut c_void,
    flags: c_uint,
) -> c_int {
    if async_io_refused() {
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
    if async_io_refused() {
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
    if async_io_refused() {
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
    if async_io_refused() {
        return -libc::ENOSYS;
    }
    unsafe { real!(io_uring_setup: fn(c_uint, *mut c_void) -> c_int)(entries, params) }
}

#[no_mangle]
pub unsafe extern "C" fn io_setup(max_events: c_int, context: *mut c_void) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS; // libaio answers a negative errno
    }
    unsafe { real!(io_setup: fn(c_int, *mut c_void) -> c_int)(max_events, context) }
}

#[no_mangle]
pub unsafe extern "C" fn io_queue_init(max_events: c_int, context: *mut c_void) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS;
    }
    unsafe { real!(io_queue_init: fn(c_int, *mut c_void) -> c_int)(max_events, context) }
}
