//! posix_spawn, system and popen: the descriptor table and environment the child gets, and the
//! spawn's file actions recorded for it.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use libc::pid_t;
use nosefs_core::Errno;

use super::open::{close, nosefs_hook_openat};
use super::pointers::bytes;
use super::process::{pointers, prepare_spawn};
use super::routing::{routed, Routed};
use super::stored::{search_stored, stored_spawn};
use super::{in_shim, serve, Guard};
use crate::fdtable;
use crate::ops;
use crate::state;

macro_rules! spawn_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: *mut pid_t,
            path: *const c_char,
            actions: *const c_void,
            attr: *const c_void,
            argv: *const *mut c_char,
            envp: *const *mut c_char,
        ) -> c_int {
            let f = real!($name: fn(*mut pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int);
            // A name with a slash is a path (posix_spawnp searches PATH only for the others; a
            // search that reaches a noseFS directory is the shim's, glibc's would miss it).
            let found;
            let path = match unsafe { search_stored(stringify!($name) == "posix_spawnp", path) } {
                Some(Ok(p)) => {
                    found = p;
                    found.as_ptr()
                }
                Some(Err(e)) => return e.0,
                None => path,
            };
            let named = !path.is_null() && unsafe { CStr::from_ptr(path) }.to_bytes().contains(&b'/');
            let stored = if named {
                match unsafe { stored_spawn(path, argv.cast()) } {
                    Ok(stored) => stored,
                    Err(e) => return e.0,
                }
            } else {
                None
            };
            let stored_args = stored.as_ref().map(|s| pointers(&s.args));
            let (path, argv) = match (&stored, &stored_args) {
                (Some(s), Some(a)) => (s.path.as_ptr(), a.as_ptr().cast()),
                _ => (path, argv),
            };
            if !actions.is_null() && !in_shim() {
                if let Err(e) = spawn_actions_allowed(actions) {
                    return e.0;
                }
            }
            let Some((env, ticket)) = (unsafe { prepare_spawn(actions, envp) }) else {
                return unsafe { f(pid, path, actions, attr, argv, envp) };
            };
            let env_ptrs = pointers(&env);
            let mut child: pid_t = -1;
            let out = if pid.is_null() { &mut child as *mut pid_t } else { pid };
            let rc = unsafe { f(out, path, actions, attr, argv, env_ptrs.as_ptr().cast()) };
            let _guard = Guard::enter();
            // SAFETY: `out` is the caller's pid pointer or our local, written on success.
            crate::exec::spawned(ticket, if rc == 0 { unsafe { *out } } else { -1 });
            rc
        }
    };
}

spawn_hook!(posix_spawn);
spawn_hook!(posix_spawnp);

/// `system` and `popen` spawn through glibc's internal posix_spawn with this process's
/// environment: the hand-over's variables are set in it for the call, and restored after.
/// (Changing the environment while another thread reads it is the usual setenv caveat; the
/// child gets the table either way.)
unsafe fn with_spawn_environment<T>(call: impl FnOnce() -> T, child_outlives_call: bool) -> T {
    let Some((env, ticket)) = (unsafe { prepare_spawn(std::ptr::null(), std::ptr::null()) }) else {
        return call();
    };
    let saved: Vec<(&str, Option<std::ffi::OsString>)> = [state::ENV_EXEC_TABLE, state::ENV_CWD]
        .into_iter()
        .map(|name| (name, std::env::var_os(name)))
        .collect();
    for (name, _) in &saved {
        let prefix = format!("{name}=");
        match env
            .iter()
            .find_map(|kv| kv.to_bytes().strip_prefix(prefix.as_bytes()))
        {
            Some(value) => std::env::set_var(
                name,
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(value),
            ),
            None => std::env::remove_var(name),
        }
    }
    let out = call();
    let _guard = Guard::enter();
    for (name, value) in saved {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
    // system's child has ended: what it did not claim is released. popen's runs on: its ticket
    // is tied to this process (released at its end at the latest).
    let holder = if child_outlives_call {
        rustix::process::getpid().as_raw_nonzero().get()
    } else {
        -1
    };
    crate::exec::spawned(ticket, holder);
    out
}

#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let f = real!(system: fn(*const c_char) -> c_int);
    unsafe { with_spawn_environment(|| f(command), false) }
}

#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let f = real!(popen: fn(*const c_char, *const c_char) -> *mut libc::FILE);
    unsafe { with_spawn_environment(|| f(command, mode), true) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_init(actions: *mut c_void) -> c_int {
    let rc = unsafe { real!(posix_spawn_file_actions_init: fn(*mut c_void) -> c_int)(actions) };
    if rc == 0 && !in_shim() {
        let opened = {
            let _guard = Guard::enter();
            crate::exec::actions_init(actions as usize)
        };
        opened.into_iter().for_each(|fd| {
            unsafe { close(fd) };
        });
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_destroy(actions: *mut c_void) -> c_int {
    if !in_shim() {
        let opened = {
            let _guard = Guard::enter();
            crate::exec::actions_destroy(actions as usize)
        };
        opened.into_iter().for_each(|fd| {
            unsafe { close(fd) };
        });
    }
    unsafe { real!(posix_spawn_file_actions_destroy: fn(*mut c_void) -> c_int)(actions) }
}

fn record_action(rc: c_int, actions: *mut c_void, action: crate::exec::FileAction) -> c_int {
    record(rc, actions, crate::exec::Recorded::Files(action))
}

fn record(rc: c_int, actions: *mut c_void, action: crate::exec::Recorded) -> c_int {
    if rc == 0 && !in_shim() {
        let _guard = Guard::enter();
        crate::exec::actions_add(actions as usize, action);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_adddup2(
    actions: *mut c_void,
    from: c_int,
    to: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_adddup2: fn(*mut c_void, c_int, c_int) -> c_int);
    let rc = unsafe { f(actions, from, to) };
    record_action(rc, actions, crate::exec::FileAction::Dup2 { from, to })
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addclose(
    actions: *mut c_void,
    fd: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addclose: fn(*mut c_void, c_int) -> c_int);
    let rc = unsafe { f(actions, fd) };
    record_action(rc, actions, crate::exec::FileAction::Close(fd))
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addopen(
    actions: *mut c_void,
    fd: c_int,
    path: *const c_char,
    oflag: c_int,
    mode: libc::mode_t,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addopen: fn(*mut c_void, c_int, *const c_char, c_int, libc::mode_t) -> c_int);
    if let Some(rc) = unsafe { add_stored_open(actions, fd, path, oflag, mode) } {
        return rc;
    }
    let rc = unsafe { f(actions, fd, path, oflag, mode) };
    record_action(rc, actions, crate::exec::FileAction::Open(fd))
}

/// Embedded mode, `addopen` of a noseFS path: the child's kernel would open it in the prefix's
/// empty directory (creating a file there the shim never shows), so the shim opens it now and
/// the action becomes a dup2 of that descriptor onto `fd`; the child adopts the description
/// from the hand-over. An open that fails makes the spawn fail with its errno, as the child's
/// would. `None` when glibc's own action serves (a kernel path; daemon mode, whose kernel finds
/// the path on the FUSE mount).
unsafe fn add_stored_open(
    actions: *mut c_void,
    fd: c_int,
    path: *const c_char,
    oflag: c_int,
    mode: libc::mode_t,
) -> Option<c_int> {
    if in_shim() || state::config().is_none() || state::daemon_mode() || actions.is_null() {
        return None;
    }
    let follow = oflag & libc::O_NOFOLLOW == 0;
    if !matches!(
        unsafe { routed(libc::AT_FDCWD, path, follow) },
        Routed::Ours(_)
    ) {
        return None;
    }
    let opened = unsafe { nosefs_hook_openat(libc::AT_FDCWD, path, oflag | libc::O_CLOEXEC, mode) };
    if opened < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return Some(record(0, actions, crate::exec::Recorded::Failed(errno)));
    }
    let dup2 = real!(posix_spawn_file_actions_adddup2: fn(*mut c_void, c_int, c_int) -> c_int);
    let rc = unsafe { dup2(actions, opened, fd) };
    if rc != 0 {
        unsafe { close(opened) };
        return Some(rc);
    }
    record(0, actions, crate::exec::Recorded::Opened(opened));
    Some(record_action(
        0,
        actions,
        crate::exec::FileAction::Dup2 {
            from: opened,
            to: fd,
        },
    ))
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addclosefrom_np(
    actions: *mut c_void,
    from: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addclosefrom_np: fn(*mut c_void, c_int) -> c_int);
    let rc = unsafe { f(actions, from) };
    record_action(rc, actions, crate::exec::FileAction::CloseFrom(from))
}

/// `addchdir_np`: a child that starts in a noseFS directory gets it from the hand-over (glibc's
/// own action would ask the kernel, which does not see it); glibc's action enters the kernel's
/// side of it instead (the FUSE mount's same directory in daemon mode, the prefix in embedded
/// mode, as `chdir` does). The directory is checked when the child is spawned.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addchdir_np(
    actions: *mut c_void,
    path: *const c_char,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addchdir_np: fn(*mut c_void, *const c_char) -> c_int);
    if in_shim() || state::config().is_none() {
        return unsafe { f(actions, path) };
    }
    let Some(p) = (unsafe { bytes(path) }) else {
        return unsafe { f(actions, path) };
    };
    // Relative to the directory an earlier action entered, when that is noseFS's.
    let earlier = {
        let _guard = Guard::enter();
        crate::exec::recorded_chdir(actions as usize)
    };
    let absolute = match earlier {
        Some(Some(dir)) if p.first() != Some(&b'/') => {
            let mut joined = dir;
            joined.push(b'/');
            joined.extend_from_slice(p);
            CString::new(joined).ok()
        }
        Some(None) if p.first() != Some(&b'/') => None, // relative to a kernel directory
        _ => Some(unsafe { CStr::from_ptr(path) }.to_owned()),
    };
    let ours = absolute.and_then(
        |a| match unsafe { routed(libc::AT_FDCWD, a.as_ptr(), true) } {
            Routed::Ours(found) => Some(found.path),
            Routed::Kernel(_) | Routed::Err(_) => None,
        },
    );
    match ours {
        Some(dir) => unsafe { add_kernel_side_chdir(actions, dir) },
        None => {
            let rc = unsafe { f(actions, path) };
            record(rc, actions, crate::exec::Recorded::Chdir(None))
        }
    }
}

/// `addfchdir_np`: as [`posix_spawn_file_actions_addchdir_np`] for a noseFS directory
/// descriptor, whose placeholder the kernel could not enter.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addfchdir_np(
    actions: *mut c_void,
    fd: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addfchdir_np: fn(*mut c_void, c_int) -> c_int);
    if in_shim() || !fdtable::is_ours(fd) {
        let rc = unsafe { f(actions, fd) };
        return if in_shim() {
            rc
        } else {
            record(rc, actions, crate::exec::Recorded::Chdir(None))
        };
    }
    let Some(file) = fdtable::get(fd) else {
        return libc::EBADF;
    };
    unsafe { add_kernel_side_chdir(actions, file.path.clone()) }
}

/// Records a change into noseFS directory `dir` and adds glibc's action for the kernel's side.
unsafe fn add_kernel_side_chdir(actions: *mut c_void, dir: Vec<u8>) -> c_int {
    let f = real!(posix_spawn_file_actions_addchdir_np: fn(*mut c_void, *const c_char) -> c_int);
    let Some(config) = state::config() else {
        return libc::EINVAL;
    };
    let kernel_side = if state::daemon_mode() {
        dir.clone()
    } else {
        config.prefix.to_vec()
    };
    let Ok(kernel_side) = CString::new(kernel_side) else {
        return libc::EINVAL;
    };
    let rc = unsafe { f(actions, kernel_side.as_ptr()) };
    record(rc, actions, crate::exec::Recorded::Chdir(Some(dir)))
}

/// Whether a spawn's actions can be carried out: the error of an open the shim made for them
/// (embedded mode), or of entering the noseFS directory they name, as the child's open or
/// chdir would have given it, which posix_spawn returns.
fn spawn_actions_allowed(actions: *const c_void) -> Result<(), Errno> {
    if let Some(errno) = crate::exec::failed_open(actions as usize) {
        return Err(Errno(errno));
    }
    let Some(Some(dir)) = crate::exec::recorded_chdir(actions as usize) else {
        return Ok(());
    };
    let dir = CString::new(dir).map_err(|_| Errno(libc::EINVAL))?;
    match unsafe { routed(libc::AT_FDCWD, dir.as_ptr(), true) } {
        Routed::Ours(found) => serve(|| ops::may_chdir(&found)),
        Routed::Kernel(_) => Err(Errno(libc::ENOENT)),
        Routed::Err(e) => Err(e),
    }
}

/// Reads a NULL-terminated array of C strings.
pub(super) unsafe fn c_strings(list: *const *const c_char) -> Vec<CString> {
    let mut out = Vec::new();
    if list.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated (execve's contract).
        let p = unsafe { *list.add(i) };
        if p.is_null() {
            break;
        }
        out.push(unsafe { CStr::from_ptr(p) }.to_owned());
        i += 1;
    }
    out
}
