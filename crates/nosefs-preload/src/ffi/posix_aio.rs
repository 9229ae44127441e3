//! POSIX asynchronous I/O (`aio_read`, `aio_write`, `aio_fsync`, `lio_listio`) on noseFS
//! descriptors. glibc serves these with threads of its own that call the kernel directly (its
//! internal `pread`, which no hook sees), so on a noseFS descriptor they would read and write
//! the kernel's placeholder instead of the file. A request on a noseFS descriptor is served here
//! at submission, through the same hooks as `pread`/`pwrite`/`fsync` (noseFS's calls take
//! microseconds; completing before the call returns is a completion POSIX allows), and its
//! result is stored where glibc keeps it in the `aiocb` (`__error_code`, `__return_value`), so
//! glibc's own `aio_error`, `aio_return`, `aio_suspend` and `aio_cancel` see a finished request.
//! Its notification (signal, thread, or thread id) is sent as glibc sends it. Requests on kernel
//! descriptors go to glibc unchanged; a `lio_listio` of both kinds hands glibc the kernel's.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{fence, Ordering};

use libc::{size_t, ssize_t};

use super::in_shim;
use super::rw::{fdatasync, fsync, pread64, pwrite64};
use crate::fdtable;

/// glibc's `struct aiocb` (`aiocb64` has the same layout on 64-bit targets), with the private
/// fields its `aio_error` and `aio_return` read.
#[repr(C)]
struct GlibcAiocb {
    fildes: c_int,
    lio_opcode: c_int,
    reqprio: c_int,
    buf: *mut c_void,
    nbytes: size_t,
    sigevent: libc::sigevent,
    next_prio: *mut c_void,
    abs_prio: c_int,
    policy: c_int,
    error_code: c_int,
    return_value: ssize_t,
    offset: i64,
    reserved: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<GlibcAiocb>() == std::mem::size_of::<libc::aiocb>());
const _: () = assert!(std::mem::offset_of!(GlibcAiocb, offset) == 128);

/// What a request asks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Request {
    Read,
    Write,
    Sync,
    DataSync,
}

/// Serves the request at `cb` if its descriptor is noseFS's, storing its result in the aiocb;
/// `false` (nothing done) for a kernel descriptor.
unsafe fn served(cb: *mut GlibcAiocb, request: Request) -> bool {
    let fd = unsafe { (*cb).fildes };
    if in_shim() || !fdtable::is_ours(fd) {
        return false;
    }
    let (buf, nbytes, offset) = unsafe { ((*cb).buf, (*cb).nbytes, (*cb).offset) };
    let result = match request {
        Request::Read => unsafe { pread64(fd, buf, nbytes, offset) },
        Request::Write => unsafe { pwrite64(fd, buf, nbytes, offset) },
        Request::Sync => unsafe { fsync(fd) as ssize_t },
        Request::DataSync => unsafe { fdatasync(fd) as ssize_t },
    };
    let error = if result < 0 {
        unsafe { *libc::__errno_location() }
    } else {
        0
    };
    unsafe {
        std::ptr::write_volatile(&raw mut (*cb).return_value, result);
        // The result before the error code: a thread polling aio_error reads it after.
        fence(Ordering::Release);
        std::ptr::write_volatile(&raw mut (*cb).error_code, error);
    }
    true
}

/// Sends the completion notification `event` asks for, as glibc sends it.
unsafe fn notify(event: *const libc::sigevent) {
    if event.is_null() {
        return;
    }
    let event = unsafe { &*event };
    match event.sigev_notify {
        libc::SIGEV_SIGNAL => queue_signal(None, event.sigev_signo, event.sigev_value),
        libc::SIGEV_THREAD_ID => queue_signal(
            Some(event.sigev_notify_thread_id),
            event.sigev_signo,
            event.sigev_value,
        ),
        libc::SIGEV_THREAD => unsafe { notify_thread(event) },
        _ => {}
    }
}

/// `signo` with `value` and the code of an asynchronous-I/O completion (SI_ASYNCIO), to the
/// process or to thread `tid` of it.
fn queue_signal(tid: Option<c_int>, signo: c_int, value: libc::sigval) {
    // siginfo_t: signo, errno, code, then the sender's pid and uid and the value.
    let mut info = [0u8; 128];
    // SAFETY: plain system calls.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    info[0..4].copy_from_slice(&signo.to_ne_bytes());
    info[8..12].copy_from_slice(&libc::SI_ASYNCIO.to_ne_bytes());
    info[16..20].copy_from_slice(&pid.to_ne_bytes());
    info[20..24].copy_from_slice(&uid.to_ne_bytes());
    info[24..32].copy_from_slice(&(value.sival_ptr as usize).to_ne_bytes());
    // SAFETY: `info` is a siginfo_t-sized buffer the kernel copies in.
    unsafe {
        match tid {
            None => libc::syscall(libc::SYS_rt_sigqueueinfo, pid, signo, info.as_ptr()),
            Some(tid) => libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, signo, info.as_ptr()),
        };
    }
}

/// The function and attributes of a SIGEV_THREAD notification: the union after
/// `sigev_notify` in glibc's `struct sigevent`.
#[repr(C)]
struct ThreadNotify {
    function: Option<extern "C" fn(libc::sigval)>,
    attributes: *mut libc::pthread_attr_t,
}

struct Call {
    function: extern "C" fn(libc::sigval),
    value: libc::sigval,
}

extern "C" fn run_notification(call: *mut c_void) -> *mut c_void {
    // SAFETY: `call` is the box `notify_thread` leaked for this thread.
    let call = unsafe { Box::from_raw(call.cast::<Call>()) };
    (call.function)(call.value);
    std::ptr::null_mut()
}

/// Runs the notification function in a new thread, with the attributes given or detached.
unsafe fn notify_thread(event: &libc::sigevent) {
    // SAFETY: for SIGEV_THREAD glibc's sigevent holds the function and the attributes from
    // byte 16 on, inside the struct (64 bytes).
    let notify = unsafe {
        &*(std::ptr::from_ref(event)
            .cast::<u8>()
            .add(16)
            .cast::<ThreadNotify>())
    };
    let Some(function) = notify.function else {
        return;
    };
    let call = Box::into_raw(Box::new(Call {
        function,
        value: event.sigev_value,
    }));
    let mut thread: libc::pthread_t = 0;
    // SAFETY: a new thread running `run_notification` on the leaked box, which it frees.
    let created = unsafe {
        libc::pthread_create(
            &mut thread,
            notify.attributes,
            run_notification,
            call.cast(),
        )
    };
    if created != 0 {
        drop(unsafe { Box::from_raw(call) });
    } else if notify.attributes.is_null() {
        unsafe { libc::pthread_detach(thread) };
    }
}

/// aio_read, aio_write, aio_fsync: served here and notified, or handed to glibc.
unsafe fn submit(cb: *mut libc::aiocb, request: Request, glibc: impl FnOnce() -> c_int) -> c_int {
    if cb.is_null() {
        return glibc();
    }
    let ours = cb.cast::<GlibcAiocb>();
    if unsafe { served(ours, request) } {
        unsafe { notify(&raw const (*ours).sigevent) };
        return 0;
    }
    glibc()
}

/// aio_read and aio_write under both their names.
macro_rules! submit_hooks {
    ($($name:ident => $request:expr),* $(,)?) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name(cb: *mut libc::aiocb) -> c_int {
                unsafe { submit(cb, $request, || real!($name: fn(*mut libc::aiocb) -> c_int)(cb)) }
            }
        )*
    };
}

submit_hooks! {
    aio_read => Request::Read,
    aio_read64 => Request::Read,
    aio_write => Request::Write,
    aio_write64 => Request::Write,
}

/// aio_fsync's operation, or EINVAL (checked before the descriptor, as glibc does).
fn sync_request(op: c_int) -> Option<Request> {
    match op {
        libc::O_SYNC => Some(Request::Sync),
        libc::O_DSYNC => Some(Request::DataSync),
        _ => None,
    }
}

/// aio_fsync under both its names: an unknown operation goes to glibc, which refuses it.
macro_rules! fsync_hooks {
    ($($name:ident),*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name(op: c_int, cb: *mut libc::aiocb) -> c_int {
                let glibc = || unsafe { real!($name: fn(c_int, *mut libc::aiocb) -> c_int)(op, cb) };
                match sync_request(op) {
                    Some(request) => unsafe { submit(cb, request, glibc) },
                    None => glibc(),
                }
            }
        )*
    };
}

fsync_hooks!(aio_fsync, aio_fsync64);

/// lio_listio: the noseFS requests served here (each notified as glibc notifies them), the
/// kernel's handed to glibc in the same list with the served ones taken out (a null entry is
/// skipped); the list's own notification or wait then covers what is left, or, when nothing is,
/// happens here.
unsafe fn list_io(
    mode: c_int,
    list: *const *mut libc::aiocb,
    count: c_int,
    event: *mut libc::sigevent,
    glibc: impl FnOnce(*const *mut libc::aiocb) -> c_int,
) -> c_int {
    if list.is_null() || count < 0 || (mode != libc::LIO_WAIT && mode != libc::LIO_NOWAIT) {
        return glibc(list);
    }
    let entries = unsafe { std::slice::from_raw_parts(list, count as usize) };
    let mut rest: Vec<*mut libc::aiocb> = Vec::with_capacity(entries.len());
    let (mut kernel, mut failed) = (false, false);
    for &cb in entries {
        let request = if cb.is_null() {
            None
        } else {
            match unsafe { (*cb).aio_lio_opcode } {
                libc::LIO_READ => Some(Request::Read),
                libc::LIO_WRITE => Some(Request::Write),
                _ => None, // LIO_NOP and anything glibc judges
            }
        };
        let ours = cb.cast::<GlibcAiocb>();
        if request.is_some_and(|r| unsafe { served(ours, r) }) {
            failed |= unsafe { (*ours).error_code } != 0;
            unsafe { notify(&raw const (*ours).sigevent) };
            rest.push(std::ptr::null_mut());
        } else {
            kernel |= !cb.is_null();
            rest.push(cb);
        }
    }
    if kernel {
        let r = glibc(rest.as_ptr());
        if r == 0 && failed && mode == libc::LIO_WAIT {
            unsafe { *libc::__errno_location() = libc::EIO };
            return -1;
        }
        return r;
    }
    if mode == libc::LIO_NOWAIT {
        unsafe { notify(event) };
    } else if failed {
        unsafe { *libc::__errno_location() = libc::EIO };
        return -1;
    }
    0
}

/// lio_listio under both its names.
macro_rules! list_hooks {
    ($($name:ident),*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name(
                mode: c_int,
                list: *const *mut libc::aiocb,
                count: c_int,
                event: *mut libc::sigevent,
            ) -> c_int {
                unsafe {
                    list_io(mode, list, count, event, |l| {
                        real!($name: fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int)(
                            mode, l, count, event,
                        )
                    })
                }
            }
        )*
    };
}

list_hooks!(lio_listio, lio_listio64);
