//! The real libc functions behind the hooks and the few raw calls the safe modules need: the
//! `real!` resolver (`dlsym(RTLD_NEXT)`, once per function), the per-thread guard, the
//! descriptors' kernel identities, descriptors handed over across exec, shared words,
//! environment variables, write-back of a kernel descriptor, the exit hook. It depends on
//! nothing else in the crate: the C boundary (`ffi`) and the safe modules both build on it.
#![allow(unsafe_code)]
// `real!` carries its own `unsafe` blocks, so that a hook may call it from safe code; inside an
// `unsafe` block they are redundant.
#![allow(unused_unsafe)]

use std::cell::Cell;
use std::ffi::{c_int, CStr};
use std::ptr::null_mut;

use nosefs_core::Errno;

/// Resolves (once) and returns the next definition of a libc function, typed.
macro_rules! real {
    ($name:ident : fn($($arg:ty),*) -> $ret:ty) => {{
        static PTR: std::sync::atomic::AtomicPtr<std::ffi::c_void> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        let mut p = PTR.load(std::sync::atomic::Ordering::Relaxed);
        if p.is_null() {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds libc's definition.
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr().cast()) };
            if p.is_null() {
                $crate::sys::missing(stringify!($name));
            }
            PTR.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: the symbol is libc's function of this name, whose C signature this is.
        unsafe { std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
    }};
}

pub(crate) fn missing(name: &str) -> ! {
    say(&format!("libc has no {name}; cannot continue"));
    std::process::abort()
}

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// Sets the per-thread guard while noseFS work runs: a libc call made while serving one goes
/// straight to the real function.
pub struct Guard;

impl Guard {
    pub fn enter() -> Option<Guard> {
        IN_SHIM.with(|g| (!g.replace(true)).then_some(Guard))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        IN_SHIM.with(|g| g.set(false));
    }
}

pub fn in_shim() -> bool {
    IN_SHIM.with(Cell::get)
}

/// One line on stderr, prefixed `nosefs:`, written straight to the descriptor (no stdio, no
/// allocation beyond the line).
pub fn say(line: &str) {
    let text = format!("nosefs: {line}\n");
    let _ = rustix::io::write(rustix::stdio::stderr(), text.as_bytes());
}

/// Writes back the dirty pages of the file of kernel descriptor `fd` and waits for them (FUSE
/// writes, pending in the daemon); `sync`: fsync instead (the daemon commits them too).
pub fn write_back_fd(fd: c_int, sync: bool) {
    // SAFETY: plain system calls on a descriptor the shim owns.
    unsafe {
        if sync {
            real!(fsync: fn(c_int) -> c_int)(fd);
        } else {
            let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            libc::sync_file_range(fd, 0, 0, how);
        }
    }
}

/// Registers `hook` to run at exit (`atexit`).
pub fn register_exit_hook(hook: extern "C" fn()) {
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(hook) };
}

/// Sends signal `signal` to the calling thread (`raise`), as the kernel signals the thread
/// whose call exceeded a limit.
pub fn raise(signal: c_int) {
    // SAFETY: raising a signal; what it does is the program's disposition of it.
    unsafe { libc::raise(signal) };
}

/// Flushes every stdio stream (`fflush(NULL)`).
pub fn flush_all_streams() {
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(null_mut()) };
}

/// Whether descriptor `fd` stays open across exec (no close-on-exec flag).
pub fn survives_exec(fd: c_int) -> bool {
    // SAFETY: F_GETFD reads a descriptor flag; an unknown number answers EBADF.
    let flags = unsafe { real!(fcntl: fn(c_int, c_int, c_int) -> c_int)(fd, libc::F_GETFD, 0) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}

/// Takes ownership of descriptor `fd`, which the previous program handed over across exec for
/// the shim alone (named in an environment variable the shim removes). The caller has checked
/// that the shim does not use it already (`fdtable::take_handed_over`).
pub fn take_descriptor(fd: c_int) -> Option<std::os::fd::OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: the descriptor is open (F_GETFD succeeds) and nothing else in the process owns it:
    // the previous program left it for the shim, before the new program's code has run.
    let open = unsafe { real!(fcntl: fn(c_int, c_int, c_int) -> c_int)(fd, libc::F_GETFD, 0) };
    // SAFETY: as above; the caller checked the shim does not use the descriptor itself.
    (open >= 0)
        .then(|| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Maps `words` 64-bit words of `fd` shared and writable, for the life of the process.
pub fn map_shared_words(
    fd: std::os::fd::BorrowedFd<'_>,
    words: usize,
) -> Result<&'static [std::sync::atomic::AtomicU64], Errno> {
    use rustix::mm::{MapFlags, ProtFlags};
    let len = words * 8;
    // SAFETY: a new shared mapping the kernel places; it is never unmapped, so the slice lives
    // as long as the process, and AtomicU64 accepts any bit pattern other processes store.
    unsafe {
        let p = rustix::mm::mmap(
            null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        Ok(std::slice::from_raw_parts(p.cast(), words))
    }
}

/// An environment variable's bytes, through libc's `getenv`, which neither allocates nor locks
/// (the configuration is read this way: the first hook may run inside the program's malloc).
pub fn env_bytes(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv returns NULL or a NUL-terminated string of the environment, which the shim
    // copies at once (nothing here keeps it across a setenv).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// The kernel device and inode behind descriptor `fd`, if it is open.
pub fn kernel_dev_ino(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: struct stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat with a valid out pointer; an unknown descriptor answers EBADF.
    let rc = unsafe { real!(fstat: fn(c_int, *mut libc::stat) -> c_int)(fd, &mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// The kernel inode behind descriptor `fd` (a placeholder's is its anchor memfd's).
pub fn kernel_ino(fd: c_int) -> Option<u64> {
    // SAFETY: struct stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat with a valid out pointer; an unknown descriptor answers EBADF.
    let rc = unsafe { real!(fstat: fn(c_int, *mut libc::stat) -> c_int)(fd, &mut st) };
    (rc == 0).then_some(st.st_ino)
}
