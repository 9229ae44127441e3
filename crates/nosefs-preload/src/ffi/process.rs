//! Processes: fork, spawn, exec.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use libc::pid_t;
use nosefs_core::Errno;

use super::open::{close, nosefs_hook_openat};
use super::pointers::bytes;
use super::spawn::c_strings;
use super::stored::{
    interpreter_line, search_stored, stored_program_memfd, stored_spawn, STORED_PROGRAM_MAX_BYTES,
};
use super::{fail, in_shim, serve, set_errno, Guard};
use crate::fdtable;
use crate::ops;
use crate::state;

#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    // A vfork child shares our memory: anything it did to the shim's state (an exec unmounts)
    // would happen to the parent too. fork is a correct vfork.
    unsafe { fork() }
}

// Resource limits: the file size limit the shim keeps (`fsize`) is read again after a change.

#[no_mangle]
pub unsafe extern "C" fn setrlimit(resource: c_int, limit: *const libc::rlimit) -> c_int {
    let r = unsafe { real!(setrlimit: fn(c_int, *const libc::rlimit) -> c_int)(resource, limit) };
    crate::fsize::forget();
    r
}

#[no_mangle]
pub unsafe extern "C" fn setrlimit64(resource: c_int, limit: *const libc::rlimit64) -> c_int {
    let r =
        unsafe { real!(setrlimit64: fn(c_int, *const libc::rlimit64) -> c_int)(resource, limit) };
    crate::fsize::forget();
    r
}

#[no_mangle]
pub unsafe extern "C" fn prlimit(
    pid: pid_t,
    resource: c_int,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    let r = unsafe {
        real!(prlimit: fn(pid_t, c_int, *const libc::rlimit, *mut libc::rlimit) -> c_int)(
            pid, resource, new, old,
        )
    };
    crate::fsize::forget();
    r
}

#[no_mangle]
pub unsafe extern "C" fn prlimit64(
    pid: pid_t,
    resource: c_int,
    new: *const libc::rlimit64,
    old: *mut libc::rlimit64,
) -> c_int {
    let r = unsafe {
        real!(prlimit64: fn(pid_t, c_int, *const libc::rlimit64, *mut libc::rlimit64) -> c_int)(
            pid, resource, new, old,
        )
    };
    crate::fsize::forget();
    r
}

/// In daemon mode the child shares this process's open descriptions: they are handed to it in
/// a ticket made before the fork (so none is released before the child claims it at its first
/// call), which the parent then ties to the child's pid (the child's end releases what it did
/// not claim). In both modes every description gets its kernel lock descriptor first, so the
/// flock and OFD locks of a description parent and child share are one kernel description's.
#[no_mangle]
pub unsafe extern "C" fn fork() -> pid_t {
    if in_shim() {
        return unsafe { real!(fork: fn() -> pid_t)() };
    }
    if !state::daemon_mode() {
        if fdtable::count() > 0 {
            let _guard = Guard::enter();
            // Outside `for_each`'s read lock: making a lock descriptor looks at the table.
            for (_, file) in fdtable::all() {
                ops::share_locks(&file);
            }
        }
        return unsafe { real!(fork: fn() -> pid_t)() };
    }
    let ticket = {
        let _guard = Guard::enter();
        let mut handles = Vec::new();
        fdtable::for_each(|file| {
            handles.push(file.handle);
            // The child shares every description, and with it the flock and OFD locks taken
            // through it: both must lock one kernel description.
            ops::share_locks(file);
        });
        handles.sort_unstable();
        handles.dedup();
        state::hold_for_child(&handles)
    };
    let pid = unsafe { real!(fork: fn() -> pid_t)() };
    if pid == 0 {
        state::claim_at_connect(ticket);
    } else {
        let _guard = Guard::enter();
        state::after_fork_in_parent(ticket, pid);
    }
    pid
}

/// Before a spawn: the descriptor table and environment the child gets ([`crate::exec`]), or
/// `None` when the shim has nothing to hand over (not configured, or called from inside it).
pub(super) unsafe fn prepare_spawn(
    actions: *const c_void,
    envp: *const *mut c_char,
) -> Option<(Vec<CString>, u64)> {
    if state::config().is_none() || in_shim() {
        return None;
    }
    let _guard = Guard::enter();
    crate::offsets::share_all();
    let env = if envp.is_null() {
        None
    } else {
        Some(unsafe { c_strings(envp.cast()) })
    };
    crate::exec::prepare_spawn(env, actions as usize).ok()
}

/// Hands the image and the noseFS descriptors over to the program about to be executed;
/// returns the environment it gets (built from `envp`, or from ours when null).
unsafe fn prepare_exec(envp: *const *const c_char) -> Option<Vec<CString>> {
    if state::config().is_none() || in_shim() {
        return None;
    }
    let _guard = Guard::enter();
    let env = if envp.is_null() {
        None
    } else {
        Some(unsafe { c_strings(envp) })
    };
    crate::exec::prepare(env).ok()
}

pub(super) fn pointers(list: &[CString]) -> Vec<*const c_char> {
    list.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int);
    // A program stored in noseFS (embedded mode): what to run instead ([`StoredSpawn`]).
    let stored = match unsafe { stored_spawn(path, argv) } {
        Ok(stored) => stored,
        Err(e) => return fail(e),
    };
    let stored_args = stored.as_ref().map(|s| pointers(&s.args));
    let (path, argv) = match (&stored, &stored_args) {
        (Some(s), Some(a)) => (s.path.as_ptr(), a.as_ptr()),
        _ => (path, argv),
    };
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(path, argv, envp) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(path, argv, env_ptrs.as_ptr()) };
    crate::exec::failed();
    rc
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int);
    // A name with a slash is not searched for: a path, which may be noseFS's (see `execve`).
    if !file.is_null() && unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/') {
        return unsafe { execve(file, argv, if envp.is_null() { environ } else { envp }) };
    }
    match unsafe { search_stored(true, file) } {
        Some(Ok(path)) => {
            return unsafe {
                execve(
                    path.as_ptr(),
                    argv,
                    if envp.is_null() { environ } else { envp },
                )
            };
        }
        Some(Err(e)) => return fail(e),
        None => {}
    }
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(file, argv, envp) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(file, argv, env_ptrs.as_ptr()) };
    crate::exec::failed();
    rc
}

extern "C" {
    static environ: *const *const c_char;
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execve(path, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execvpe(file, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int);
    if fdtable::is_ours(fd) {
        return unsafe { exec_descriptor(fd, argv, envp) };
    }
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(fd, argv, envp) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(fd, argv, env_ptrs.as_ptr()) };
    crate::exec::failed();
    rc
}

/// `execveat`: a descriptor alone (`AT_EMPTY_PATH`) is [`fexecve`]; a path is [`execve`]'s when
/// it is absolute or relative to the working directory, and is opened first when it is relative
/// to a noseFS directory.
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let f = real!(execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int);
    match unsafe { bytes(path) } {
        Some([]) if flags & libc::AT_EMPTY_PATH != 0 => {
            return unsafe { fexecve(dirfd, argv, envp) };
        }
        Some(p)
            if flags & !libc::AT_EMPTY_PATH == 0 && (p[0] == b'/' || dirfd == libc::AT_FDCWD) =>
        {
            return unsafe { execve(path, argv, envp) };
        }
        Some(_) if fdtable::is_ours(dirfd) => {
            let nofollow = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                libc::O_NOFOLLOW
            } else {
                0
            };
            let fd = unsafe {
                nosefs_hook_openat(dirfd, path, libc::O_RDONLY | libc::O_CLOEXEC | nofollow, 0)
            };
            if fd < 0 {
                return -1;
            }
            let rc = unsafe { fexecve(fd, argv, envp) };
            let errno = std::io::Error::last_os_error();
            unsafe { close(fd) };
            set_errno(Errno(errno.raw_os_error().unwrap_or(libc::ENOEXEC)));
            return rc;
        }
        _ => {}
    }
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(dirfd, path, argv, envp, flags) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(dirfd, path, argv, env_ptrs.as_ptr(), flags) };
    crate::exec::failed();
    rc
}

/// `fexecve` of a noseFS descriptor, in either mode: the kernel cannot open the file, so the
/// program runs from a sealed memfd copy of it, as a program stored in noseFS does in embedded
/// mode ([`stored_spawn`]). A `#!` script runs through its interpreter with the copy as
/// `/dev/fd/N`, as the kernel names a script run by descriptor, and left open for the
/// interpreter to read (the kernel leaves the script's descriptor open too, and refuses a
/// close-on-exec one). Returns only on failure, with errno set.
unsafe fn exec_descriptor(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let image = match serve(|| ops::program_image_of(fd, STORED_PROGRAM_MAX_BYTES)) {
        Ok(image) => image,
        Err(e) => return fail(e),
    };
    let args = if argv.is_null() {
        Vec::new()
    } else {
        unsafe { c_strings(argv) }
    };
    let script = image.strip_prefix(b"#!");
    // The kernel refuses a script whose descriptor goes with the exec: the interpreter could
    // not open it.
    if script.is_some() && !crate::sys::survives_exec(fd) {
        return fail(Errno(libc::ENOENT));
    }
    let interpreter = match script.map(interpreter_line) {
        Some(None) => return fail(Errno(libc::ENOEXEC)),
        Some(Some(found)) => Some(found),
        None => None,
    };
    let memfd = match stored_program_memfd(&image, interpreter.is_none()) {
        Ok(memfd) => memfd,
        Err(e) => return fail(e),
    };
    let copy = std::os::fd::AsRawFd::as_raw_fd(&memfd);
    let (path, args) = match interpreter {
        Some((interpreter, arg)) => {
            let mut with = vec![interpreter.clone()];
            with.extend(arg);
            with.push(CString::new(format!("/dev/fd/{copy}")).expect("no NUL"));
            with.extend(args.into_iter().skip(1));
            (interpreter, with)
        }
        None => (
            CString::new(format!("/proc/self/fd/{copy}")).expect("no NUL"),
            args,
        ),
    };
    let arg_ptrs = pointers(&args);
    let env = if envp.is_null() {
        unsafe { environ }
    } else {
        envp
    };
    // An interpreter stored in noseFS is `execve`'s to find.
    let rc = unsafe { execve(path.as_ptr(), arg_ptrs.as_ptr(), env) };
    let errno = std::io::Error::last_os_error();
    drop(memfd);
    set_errno(Errno(errno.raw_os_error().unwrap_or(libc::ENOEXEC)));
    rc
}
