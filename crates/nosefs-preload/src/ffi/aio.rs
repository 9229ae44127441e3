//! Linux AIO (`io_setup`, `io_submit`, `io_getevents`, ...; through libaio or `syscall()`, as
//! MariaDB calls `io_getevents`) in a process the shim serves, emulated: the kernel's contexts
//! would hand requests to the kernel, which sees only the placeholders of noseFS descriptors.
//! Every context of the process is the shim's ([`crate::linux_aio`]), a request is served at
//! submission through the shim's own `pread`, `pwrite`, `preadv2`, `pwritev2`, `fsync` and
//! `fdatasync` (noseFS's or the kernel's descriptor alike), and its completion event is collected
//! by `io_getevents` (an eventfd named with IOCB_FLAG_RESFD is signalled). Completing before
//! `io_submit` returns is a completion the interface allows; `io_destroy` ends a wait in another
//! thread, as MariaDB's shutdown expects. (io_uring: `uring.rs`.)

use std::ffi::{c_int, c_long, c_void};
use std::time::Duration;

use libc::{size_t, ssize_t};
use nosefs_core::Errno;

use super::rw::{fdatasync, fsync, pread64, preadv64v2, pwrite64, pwritev64v2};
use crate::linux_aio::{self, Context, Event};
use crate::state;

/// Whether the process's asynchronous I/O is the shim's (a process it serves).
pub(super) fn serves_async_io() -> bool {
    state::config().is_some()
}

/// The kernel's `struct iocb`.
#[repr(C)]
pub struct Iocb {
    data: u64,
    key: u32,
    rw_flags: c_int,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

const _: () = assert!(std::mem::size_of::<Iocb>() == 64);
const _: () = assert!(std::mem::size_of::<Event>() == 32);

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FSYNC: u16 = 2;
const IOCB_CMD_FDSYNC: u16 = 3;
const IOCB_CMD_PREADV: u16 = 7;
const IOCB_CMD_PWRITEV: u16 = 8;
const IOCB_FLAG_RESFD: u32 = 1;

/// io_pgetevents' number (the libc crate does not name it).
#[cfg(target_arch = "x86_64")]
const SYS_IO_PGETEVENTS: c_long = 333;
#[cfg(target_arch = "aarch64")]
const SYS_IO_PGETEVENTS: c_long = 292;

fn errno_now() -> c_int {
    unsafe { *libc::__errno_location() }
}

/// `io_setup`: a new context's id into `*id_out`, which must hold 0.
unsafe fn setup(max_events: i64, id_out: *mut u64) -> Result<i64, Errno> {
    if id_out.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    if unsafe { *id_out } != 0 {
        return Err(Errno::EINVAL);
    }
    let id = linux_aio::setup(max_events)?;
    unsafe { *id_out = id };
    Ok(0)
}

/// Runs one request now: its result (bytes, or a negative errno), or the error that refuses
/// its submission.
unsafe fn run(cb: &Iocb) -> Result<i64, Errno> {
    let fd = cb.fildes as c_int;
    if cb.reserved2 != 0 {
        return Err(Errno::EINVAL);
    }
    // A descriptor that is not open, or not open for the direction asked, is refused at
    // submission, as the kernel does (the shim's fcntl answers for noseFS descriptors).
    let status = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    let access = status & libc::O_ACCMODE;
    let refused = match cb.opcode {
        IOCB_CMD_PREAD | IOCB_CMD_PREADV => access == libc::O_WRONLY,
        IOCB_CMD_PWRITE | IOCB_CMD_PWRITEV => access == libc::O_RDONLY,
        _ => false,
    };
    if status < 0 || refused {
        return Err(Errno::EBADF);
    }
    let (buf, nbytes, offset) = (cb.buf as *mut c_void, cb.nbytes as size_t, cb.offset);
    let one = libc::iovec {
        iov_base: buf,
        iov_len: nbytes,
    };
    let result: ssize_t = match cb.opcode {
        IOCB_CMD_PREAD if cb.rw_flags == 0 => unsafe { pread64(fd, buf, nbytes, offset) },
        IOCB_CMD_PWRITE if cb.rw_flags == 0 => unsafe { pwrite64(fd, buf, nbytes, offset) },
        IOCB_CMD_PREAD => unsafe { preadv64v2(fd, &one, 1, offset, cb.rw_flags) },
        IOCB_CMD_PWRITE => unsafe { pwritev64v2(fd, &one, 1, offset, cb.rw_flags) },
        IOCB_CMD_PREADV | IOCB_CMD_PWRITEV => {
            let (iov, count) = (buf as *const libc::iovec, c_int::try_from(nbytes));
            let count = count.map_err(|_| Errno::EINVAL)?;
            if cb.opcode == IOCB_CMD_PREADV {
                unsafe { preadv64v2(fd, iov, count, offset, cb.rw_flags) }
            } else {
                unsafe { pwritev64v2(fd, iov, count, offset, cb.rw_flags) }
            }
        }
        IOCB_CMD_FSYNC => unsafe { fsync(fd) as ssize_t },
        IOCB_CMD_FDSYNC => unsafe { fdatasync(fd) as ssize_t },
        _ => return Err(Errno::EINVAL),
    };
    Ok(if result < 0 {
        -i64::from(errno_now())
    } else {
        result as i64
    })
}

/// `io_submit`: serves the requests in order; how many were submitted (an error only when the
/// first is refused).
unsafe fn submit(context: &Context, count: i64, cbs: *const *const Iocb) -> Result<i64, Errno> {
    if count < 0 {
        return Err(Errno::EINVAL);
    }
    let mut done = 0;
    for i in 0..count as usize {
        let refused = |e: Errno| if done == 0 { Err(e) } else { Ok(done) };
        if cbs.is_null() {
            return refused(Errno(libc::EFAULT));
        }
        let cb = unsafe { *cbs.add(i) };
        if cb.is_null() {
            return refused(Errno(libc::EFAULT));
        }
        if context.room() == 0 {
            return refused(Errno(libc::EAGAIN));
        }
        let cb = unsafe { &*cb };
        let res = match unsafe { run(cb) } {
            Ok(res) => res,
            Err(e) => return refused(e),
        };
        context.complete(Event {
            data: cb.data,
            obj: std::ptr::from_ref(cb) as u64,
            res,
            res2: 0,
        });
        if cb.flags & IOCB_FLAG_RESFD != 0 {
            let one: u64 = 1;
            unsafe { libc::write(cb.resfd as c_int, std::ptr::from_ref(&one).cast(), 8) };
        }
        done += 1;
    }
    Ok(done)
}

/// `io_getevents`: waits as the kernel does, with `timeout` relative, then copies the events.
unsafe fn get_events(
    context: &Context,
    min: i64,
    max: i64,
    out: *mut Event,
    timeout: *const libc::timespec,
) -> Result<i64, Errno> {
    if min < 0 || max < 0 || min > max {
        return Err(Errno::EINVAL);
    }
    let timeout = if timeout.is_null() {
        None
    } else {
        let t = unsafe { &*timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            return Err(Errno::EINVAL);
        }
        Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    };
    if out.is_null() && max > 0 {
        return Err(Errno(libc::EFAULT));
    }
    let events = context.get_events(min as usize, max as usize, timeout)?;
    for (i, e) in events.iter().enumerate() {
        unsafe { out.add(i).write(*e) };
    }
    Ok(events.len() as i64)
}

/// `io_pgetevents`: [`get_events`] with `mask` (if any) as the thread's signal mask meanwhile.
unsafe fn get_events_masked(
    context: &Context,
    min: i64,
    max: i64,
    out: *mut Event,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> Result<i64, Errno> {
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    let masked =
        !mask.is_null() && unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) } == 0;
    let got = unsafe { get_events(context, min, max, out, timeout) };
    if masked {
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
    got
}

/// libaio's convention: the value, or a negative errno.
fn negative(r: Result<i64, Errno>) -> c_int {
    match r {
        Ok(v) => v as c_int,
        Err(e) => -e.0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_setup(max_events: c_int, context: *mut u64) -> c_int {
    if serves_async_io() {
        return negative(unsafe { setup(i64::from(max_events), context) });
    }
    unsafe { real!(io_setup: fn(c_int, *mut u64) -> c_int)(max_events, context) }
}

#[no_mangle]
pub unsafe extern "C" fn io_queue_init(max_events: c_int, context: *mut u64) -> c_int {
    if serves_async_io() {
        if max_events <= 0 {
            return -libc::EINVAL;
        }
        if !context.is_null() {
            unsafe { *context = 0 };
        }
        return negative(unsafe { setup(i64::from(max_events), context) });
    }
    unsafe { real!(io_queue_init: fn(c_int, *mut u64) -> c_int)(max_events, context) }
}

#[no_mangle]
pub unsafe extern "C" fn io_destroy(context: u64) -> c_int {
    if linux_aio::lookup(context).is_some() {
        return negative(linux_aio::destroy(context).map(|()| 0));
    }
    unsafe { real!(io_destroy: fn(u64) -> c_int)(context) }
}

#[no_mangle]
pub unsafe extern "C" fn io_queue_release(context: u64) -> c_int {
    unsafe { io_destroy(context) }
}

#[no_mangle]
pub unsafe extern "C" fn io_submit(context: u64, count: c_long, cbs: *const *const Iocb) -> c_int {
    if let Some(ours) = linux_aio::lookup(context) {
        return negative(unsafe { submit(&ours, count, cbs) });
    }
    unsafe { real!(io_submit: fn(u64, c_long, *const *const Iocb) -> c_int)(context, count, cbs) }
}

#[no_mangle]
pub unsafe extern "C" fn io_getevents(
    context: u64,
    min: c_long,
    max: c_long,
    events: *mut Event,
    timeout: *mut libc::timespec,
) -> c_int {
    if let Some(ours) = linux_aio::lookup(context) {
        return negative(unsafe { get_events(&ours, min, max, events, timeout) });
    }
    unsafe {
        real!(io_getevents: fn(u64, c_long, c_long, *mut Event, *mut libc::timespec) -> c_int)(
            context, min, max, events, timeout,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_pgetevents(
    context: u64,
    min: c_long,
    max: c_long,
    events: *mut Event,
    timeout: *mut libc::timespec,
    mask: *mut libc::sigset_t,
) -> c_int {
    if let Some(ours) = linux_aio::lookup(context) {
        return negative(unsafe { get_events_masked(&ours, min, max, events, timeout, mask) });
    }
    unsafe {
        real!(io_pgetevents: fn(u64, c_long, c_long, *mut Event, *mut libc::timespec, *mut libc::sigset_t) -> c_int)(
            context, min, max, events, timeout, mask,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_cancel(context: u64, cb: *mut Iocb, event: *mut Event) -> c_int {
    if linux_aio::lookup(context).is_some() {
        // Every request completed at submission: nothing is in flight to cancel.
        return -libc::EINVAL;
    }
    unsafe { real!(io_cancel: fn(u64, *mut Iocb, *mut Event) -> c_int)(context, cb, event) }
}

/// libaio's completion callback, kept in a request's `data` by `io_set_callback`.
type Callback = unsafe extern "C" fn(u64, *mut Iocb, c_long, c_long);

#[no_mangle]
pub unsafe extern "C" fn io_queue_run(context: u64) -> c_int {
    let Some(ours) = linux_aio::lookup(context) else {
        return unsafe { real!(io_queue_run: fn(u64) -> c_int)(context) };
    };
    loop {
        match ours.get_events(0, 1, Some(Duration::ZERO)) {
            Ok(events) if events.is_empty() => return 0,
            Ok(events) => {
                let e = events[0];
                if e.data != 0 {
                    // SAFETY: libaio's io_queue_run contract: `data` holds the callback.
                    let callback: Callback = unsafe { std::mem::transmute(e.data as usize) };
                    unsafe {
                        callback(
                            context,
                            e.obj as *mut Iocb,
                            e.res as c_long,
                            e.res2 as c_long,
                        )
                    };
                }
            }
            Err(e) => return -e.0,
        }
    }
}

/// `syscall()`'s Linux AIO numbers on the shim's contexts (MariaDB calls io_getevents so, to
/// let io_destroy end the wait): the call's answer, or `None` for every other call (`raw.rs`).
pub(super) unsafe fn raw(number: c_long, a: [c_long; 6]) -> Option<c_long> {
    let [a1, a2, a3, a4, a5, a6] = a;
    let id = a1 as u64;
    let context = match number {
        libc::SYS_io_destroy
        | libc::SYS_io_submit
        | libc::SYS_io_getevents
        | SYS_IO_PGETEVENTS
        | libc::SYS_io_cancel => linux_aio::lookup(id),
        _ => None,
    };
    let r = match (number, context) {
        (libc::SYS_io_setup, _) if serves_async_io() => unsafe { setup(a1, a2 as *mut u64) },
        (_, None) => return None,
        (libc::SYS_io_destroy, Some(_)) => linux_aio::destroy(id).map(|()| 0),
        (libc::SYS_io_submit, Some(c)) => unsafe { submit(&c, a2, a3 as *const *const Iocb) },
        (libc::SYS_io_getevents, Some(c)) => unsafe {
            get_events(&c, a2, a3, a4 as *mut Event, a5 as *const libc::timespec)
        },
        (SYS_IO_PGETEVENTS, Some(c)) => {
            // The sixth argument: { const sigset_t *mask; size_t size } or null.
            let sig = a6 as *const (*const libc::sigset_t, size_t);
            let mask = if sig.is_null() {
                std::ptr::null()
            } else {
                unsafe { (*sig).0 }
            };
            unsafe {
                get_events_masked(
                    &c,
                    a2,
                    a3,
                    a4 as *mut Event,
                    a5 as *const libc::timespec,
                    mask,
                )
            }
        }
        (_, Some(_)) => Err(Errno::EINVAL), // io_cancel: nothing is in flight
    };
    Some(match r {
        Ok(v) => v as c_long,
        Err(e) => {
            unsafe { *libc::__errno_location() = e.0 };
            -1
        }
    })
}
