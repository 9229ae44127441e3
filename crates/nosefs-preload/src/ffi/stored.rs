//! Programs and shared objects stored in noseFS, in embedded mode, where the kernel cannot see
//! them: dlopen, exec and posix_spawn get a sealed memfd copy (or a `#!` script's interpreter
//! on the script's path).

use std::ffi::{c_char, CStr, CString};

use nosefs_core::Errno;

use super::pointers::bytes;
use super::routing::{routed, Routed};
use super::spawn::c_strings;
use super::{in_shim, serve, Guard};
use crate::fdtable;
use crate::ops;
use crate::route;
use crate::state;

/// Embedded mode, `dlopen` (from `nosefs_c_dlopen` in C): the path of a sealed memfd copy of
/// the shared object `file` names when that is a noseFS file, which the dynamic loader, opening
/// paths itself through the kernel, would not find (a Python extension built in a virtual
/// environment on noseFS); null otherwise, and the real dlopen gets `file` as it was. Only a
/// name with a slash: the loader searches the others. Copies are kept for the life of the
/// process, one per version of a file (inode, size, modification time), so a second dlopen of
/// it finds the object already loaded, as the loader matches the memfd's inode. Libraries the
/// copy needs are found by the loader as usual (not on noseFS). Daemon mode needs none of this:
/// the loader finds the file on the FUSE mount.
#[no_mangle]
pub unsafe extern "C" fn nosefs_stored_library(file: *const c_char) -> *const c_char {
    if in_shim() || state::config().is_none() || state::daemon_mode() {
        return std::ptr::null();
    }
    match unsafe { bytes(file) } {
        Some(name) if name.contains(&b'/') => {}
        _ => return std::ptr::null(),
    }
    let Routed::Ours(found) = (unsafe { routed(libc::AT_FDCWD, file, true) }) else {
        return std::ptr::null();
    };
    let _guard = Guard::enter();
    let Some(attr) = found.attr else {
        return std::ptr::null();
    };
    let version = (attr.ino, attr.size, attr.mtime_ns);
    let mut copies = STORED_LIBRARIES.lock();
    if let Some((_, path, _)) = copies.iter().find(|(v, _, _)| *v == version) {
        return path.as_ptr();
    }
    let Ok(image) = ops::library_image(&found, STORED_PROGRAM_MAX_BYTES) else {
        return std::ptr::null();
    };
    let Some(memfd) = stored_program_memfd(&image, true)
        .ok()
        .and_then(fdtable::LockFd::moved_high)
    else {
        return std::ptr::null();
    };
    let path = CString::new(format!("/proc/self/fd/{}", memfd.raw())).expect("no NUL");
    copies.push((version, path, memfd));
    copies
        .last()
        .map_or(std::ptr::null(), |(_, path, _)| path.as_ptr())
}

/// [`nosefs_stored_library`]'s copies: file version, the path the loader opened, the memfd.
#[allow(clippy::type_complexity)]
static STORED_LIBRARIES: parking_lot::Mutex<Vec<((u64, u64, i64), CString, fdtable::LockFd)>> =
    parking_lot::Mutex::new(Vec::new());

/// Embedded mode, execvp and posix_spawnp of a name without a slash (`search`: the caller
/// searches PATH): when a directory of this process's PATH is in noseFS, the shim searches, as
/// glibc would, for the first executable regular file `dir/name` (noseFS's through the core,
/// the kernel's through the kernel), since glibc's own search asks the kernel, which sees an
/// empty directory there. EACCES if only files the caller may not execute were found, ENOENT
/// if none. `None` when glibc's search serves (no PATH directory is noseFS's; daemon mode,
/// whose kernel finds them on the FUSE mount).
pub(super) unsafe fn search_stored(
    search: bool,
    file: *const c_char,
) -> Option<Result<CString, Errno>> {
    if !search || in_shim() || state::config().is_none() || state::daemon_mode() {
        return None;
    }
    let name = unsafe { bytes(file) }?;
    if name.is_empty() || name.contains(&b'/') {
        return None;
    }
    // No guard here: the candidates are routed like any path a program names.
    let path = std::env::var_os("PATH")
        .map(|p| std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).to_vec())
        .unwrap_or_else(|| b"/bin:/usr/bin".to_vec());
    // An empty entry is the working directory.
    let ours = |dir: &[u8]| {
        if dir.first() == Some(&b'/') {
            route::maybe_ours(dir)
        } else {
            route::cwd_is_ours()
        }
    };
    let dirs: Vec<&[u8]> = path.split(|&b| b == b':').collect();
    if !dirs.iter().any(|d| ours(d)) {
        return None;
    }
    let mut denied = false;
    for dir in dirs {
        let mut candidate = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        candidate.push(b'/');
        candidate.extend_from_slice(name);
        let Ok(candidate) = CString::new(candidate) else {
            continue;
        };
        match executable(&candidate) {
            Ok(()) => return Some(Ok(candidate)),
            Err(e) if e == Errno(libc::EACCES) => denied = true,
            Err(_) => {}
        }
    }
    Some(Err(Errno(if denied { libc::EACCES } else { libc::ENOENT })))
}

/// Whether `path` names a regular file the caller may execute (EACCES if it may not, ENOENT
/// or another error if there is none).
fn executable(path: &CStr) -> Result<(), Errno> {
    match unsafe { routed(libc::AT_FDCWD, path.as_ptr(), true) } {
        Routed::Ours(found) => {
            let attr = found.attr.ok_or(Errno::ENOENT)?;
            if attr.mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Errno(libc::EACCES));
            }
            serve(|| ops::access(&found, libc::X_OK))
        }
        Routed::Kernel(k) => {
            let path = Routed::kernel_path(&k, path.as_ptr());
            let st = rustix::fs::stat(unsafe { CStr::from_ptr(path) })
                .map_err(|e| Errno(e.raw_os_error()))?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Errno(libc::EACCES));
            }
            rustix::fs::access(unsafe { CStr::from_ptr(path) }, rustix::fs::Access::EXEC_OK)
                .map_err(|e| Errno(e.raw_os_error()))
        }
        Routed::Err(e) => Err(e),
    }
}

/// Embedded mode: what exec and posix_spawn run instead of `path` when that is a program stored
/// in noseFS, which the kernel cannot see (the prefix is an empty directory to it): a `#!`
/// script's interpreter with the script's path among its arguments (the interpreter, under the
/// shim, opens it), or the program's sealed memfd copy by its /proc path (the kernel opens it
/// before the exec closes the close-on-exec descriptor; kept open until the call returns).
/// Daemon mode needs none of this: there the prefix is the FUSE mount, where the kernel finds
/// the program itself.
pub(super) struct StoredSpawn {
    pub(super) path: CString,
    pub(super) args: Vec<CString>,
    _memfd: Option<std::os::fd::OwnedFd>,
}

/// [`StoredSpawn`] for `path` with arguments `argv`, `None` when `path` is not noseFS's (or in
/// daemon mode, where the kernel finds it on the FUSE mount).
pub(super) unsafe fn stored_spawn(
    path: *const c_char,
    argv: *const *const c_char,
) -> Result<Option<StoredSpawn>, Errno> {
    if path.is_null() || in_shim() || state::config().is_none() || state::daemon_mode() {
        return Ok(None);
    }
    let mut path = unsafe { CStr::from_ptr(path) }.to_owned();
    let mut args = if argv.is_null() {
        Vec::new()
    } else {
        unsafe { c_strings(argv) }
    };
    for depth in 0..=INTERPRETER_DEPTH_MAX {
        let found = match unsafe { routed(libc::AT_FDCWD, path.as_ptr(), true) } {
            Routed::Ours(found) => found,
            // A kernel program reached through noseFS (a symlink there, `..` out of it): the
            // kernel gets the path it resolves to, which it can see.
            Routed::Kernel(Some(resolved)) => {
                return Ok(Some(StoredSpawn {
                    path: resolved,
                    args,
                    _memfd: None,
                }))
            }
            Routed::Kernel(None) | Routed::Err(_) if depth == 0 => return Ok(None),
            Routed::Kernel(None) | Routed::Err(_) => {
                return Ok(Some(StoredSpawn {
                    path,
                    args,
                    _memfd: None,
                }))
            }
        };
        let image = serve(|| ops::program_image(&found, STORED_PROGRAM_MAX_BYTES))?;
        let Some(line) = image.strip_prefix(b"#!") else {
            let memfd = stored_program_memfd(&image, true)?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&memfd);
            return Ok(Some(StoredSpawn {
                path: CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL"),
                args,
                _memfd: Some(memfd),
            }));
        };
        let (interpreter, arg) = interpreter_line(line).ok_or(Errno(libc::ENOEXEC))?;
        let mut with = vec![interpreter.clone()];
        with.extend(arg);
        with.push(path);
        with.extend(args.into_iter().skip(1));
        (path, args) = (interpreter, with);
    }
    Err(Errno(libc::ELOOP))
}

/// Largest program embedded mode runs from noseFS (it is copied into memory first).
pub(super) const STORED_PROGRAM_MAX_BYTES: u64 = 1 << 30;
/// How many `#!` interpreters may lead to one another (the kernel allows four).
const INTERPRETER_DEPTH_MAX: usize = 4;

/// A sealed memfd holding `image`, close-on-exec unless the program exec runs must read it.
pub(super) fn stored_program_memfd(
    image: &[u8],
    close_on_exec: bool,
) -> Result<std::os::fd::OwnedFd, Errno> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let io = |e: rustix::io::Errno| Errno(e.raw_os_error());
    let _guard = Guard::enter();
    let cloexec = if close_on_exec {
        MemfdFlags::CLOEXEC
    } else {
        MemfdFlags::empty()
    };
    let fd =
        rustix::fs::memfd_create("nosefs-exec", cloexec | MemfdFlags::ALLOW_SEALING).map_err(io)?;
    let mut at = 0;
    while at < image.len() {
        at += rustix::io::write(&fd, &image[at..]).map_err(io)?;
    }
    rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )
    .map_err(io)?;
    Ok(fd)
}

/// The interpreter a `#!` line names (`line`: what follows `#!`) and its optional argument, as
/// the kernel reads them: the first line (at most 255 bytes), blanks trimmed, the interpreter
/// up to the first blank and the rest as one argument.
pub(super) fn interpreter_line(line: &[u8]) -> Option<(CString, Option<CString>)> {
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = line.get(..255).unwrap_or(line);
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = line.iter().position(|b| !blank(b)).unwrap_or(line.len());
    let line = &line[start..];
    let end = line.iter().rposition(|b| !blank(b)).map_or(0, |i| i + 1);
    let line = &line[..end];
    let split = line.iter().position(blank).unwrap_or(line.len());
    let (interpreter, rest) = line.split_at(split);
    let arg = &rest[rest.iter().position(|b| !blank(b)).unwrap_or(rest.len())..];
    if interpreter.is_empty() {
        return None;
    }
    let arg = if arg.is_empty() {
        None
    } else {
        Some(CString::new(arg).ok()?)
    };
    Some((CString::new(interpreter).ok()?, arg))
}
