//! Paths: which ones are noseFS's, and resolving those inside it.
//!
//! Routing is optimistic and lexical up to the prefix: an absolute path (or a relative one joined
//! to the working directory or a noseFS directory descriptor) that does not lead into the prefix
//! goes to the kernel unchanged, with no extra system call. Inside the prefix every component is
//! resolved by the core, as the kernel would: search permission on each directory, symbolic
//! links followed (an absolute target starts over, and may leave noseFS), `..` at the noseFS root
//! leaving the prefix. The kernel sees the prefix as an empty directory (or the FUSE mount of
//! the same image), so a call the shim misses fails there instead of writing somewhere else.
//!
//! The working directory: when a program changes into noseFS, the shim remembers the logical
//! path and moves the kernel's working directory to the prefix directory itself.

use std::ffi::CString;
use std::sync::Arc;

use nosefs_core::vfs::walk::{join, lexical, lexical_outside, starts_with_prefix};
use nosefs_core::vfs::Walked;
use nosefs_core::Errno;
use parking_lot::RwLock;

use crate::fdtable::{self, Kind};
use crate::state;

/// Where a path leads.
#[derive(Debug)]
pub enum Route {
    /// Not noseFS's: the kernel gets the path. `Some` when resolution inside noseFS produced a
    /// different path (a symlink or `..` leading out); `None` means "the caller's path as given".
    Kernel(Option<CString>),
    /// A name in noseFS.
    Ours(Found),
}

/// A path resolved inside noseFS.
pub use nosefs_core::vfs::Found;

/// The working directory inside noseFS, if it is there.
static CWD: RwLock<Option<Vec<u8>>> = RwLock::new(None);
/// The kernel's working directory, as last seen (for relative paths that lead into noseFS).
static KERNEL_CWD: RwLock<Option<Vec<u8>>> = RwLock::new(None);

/// Whether the working directory is inside noseFS.
pub fn cwd_is_ours() -> bool {
    CWD.read().is_some()
}

/// The working directory inside noseFS.
pub fn cwd() -> Option<Vec<u8>> {
    CWD.read().clone()
}

/// Sets (or clears) the noseFS working directory.
pub fn set_cwd(path: Option<Vec<u8>>) {
    *CWD.write() = path;
}

/// Records that the kernel's working directory changed.
pub fn forget_kernel_cwd() {
    *KERNEL_CWD.write() = None;
}

fn kernel_cwd() -> Option<Vec<u8>> {
    if let Some(cwd) = KERNEL_CWD.read().clone() {
        return Some(cwd);
    }
    let cwd = rustix::process::getcwd(Vec::new()).ok()?.into_bytes();
    *KERNEL_CWD.write() = Some(cwd.clone());
    Some(cwd)
}

/// A cheap first test for an absolute path: could it lead into noseFS (it starts with the prefix,
/// or has a `..` component)? No lock, no system call.
pub fn maybe_ours(path: &[u8]) -> bool {
    state::config().is_some_and(|c| path.starts_with(&c.prefix))
        || path.windows(3).any(|w| w == b"/..")
}

/// Routes `path` relative to `dirfd` (AT_FDCWD or a descriptor). `follow_last` follows a
/// symbolic link in the last component.
pub fn route(dirfd: i32, path: &[u8], follow_last: bool) -> Result<Route, Errno> {
    match route_start(dirfd, path)? {
        Start::Kernel(k) => Ok(Route::Kernel(k)),
        Start::In(dir, name) => {
            if let Some(route) = in_directory(&dir, &name, follow_last)? {
                return Ok(route);
            }
            let normal = join(&dir.path, &name);
            match state::with_service(|s| s.walk(normal, follow_last))? {
                Walked::Found(found) => Ok(Route::Ours(found)),
                Walked::Outside(path) => Ok(Route::Kernel(Some(c_path(path)?))),
            }
        }
        Start::Walk(normal) => match state::with_service(|s| s.walk(normal, follow_last))? {
            Walked::Found(found) => Ok(Route::Ours(found)),
            Walked::Outside(path) => Ok(Route::Kernel(Some(c_path(path)?))),
        },
    }
}

/// How far [`route`] gets before it asks noseFS to walk a path.
#[derive(Debug)]
pub enum Start {
    /// Not noseFS's, as in [`Route::Kernel`].
    Kernel(Option<CString>),
    /// One plain name in an open noseFS directory: looked up there (the `*at` fast path),
    /// unless it needs a full walk (a symbolic link to follow), which starts at the directory's
    /// path.
    In(Arc<fdtable::OpenFile>, Vec<u8>),
    /// Under the prefix: this absolute logical path is noseFS's to walk (a call that walks and
    /// acts in one request sends it as it is).
    Walk(Vec<u8>),
}

/// [`route`] up to the walk.
pub fn route_start(dirfd: i32, path: &[u8]) -> Result<Start, Errno> {
    let Some(config) = state::config() else {
        return Ok(Start::Kernel(None));
    };
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() >= libc::PATH_MAX as usize {
        // The kernel refuses a path string this long wherever it leads.
        return Err(Errno(libc::ENAMETOOLONG));
    }
    let absolute: Vec<u8> = if path[0] == b'/' {
        if !path.starts_with(&config.prefix) && !path.windows(3).any(|w| w == b"/..") {
            return Ok(Start::Kernel(None)); // the common case for kernel paths
        }
        path.to_vec()
    } else if dirfd == libc::AT_FDCWD {
        match cwd() {
            Some(cwd) => join(&cwd, path),
            None => {
                // A relative path from a kernel directory reaches noseFS only through `..` or
                // by naming the prefix's components.
                let Some(kcwd) = kernel_cwd() else {
                    return Ok(Start::Kernel(None));
                };
                let joined = join(&kcwd, path);
                if !starts_with_prefix(&lexical(&joined), &config.prefix) {
                    return Ok(Start::Kernel(None));
                }
                joined
            }
        }
    } else {
        match fdtable::get(dirfd) {
            Some(dir) if dir.kind == Kind::Dir || dir.kind == Kind::Path => {
                if is_plain_name(path) {
                    return Ok(Start::In(dir, path.to_vec()));
                }
                join(&dir.path, path)
            }
            Some(_) => return Err(Errno::ENOTDIR),
            None => return Ok(Start::Kernel(None)),
        }
    };
    let normal = lexical_outside(&absolute, &config.prefix);
    if !starts_with_prefix(&normal, &config.prefix) {
        return Ok(Start::Kernel(None));
    }
    Ok(Start::Walk(normal))
}

/// The fast path of `*at` calls: one plain name (no `/`, not `.` or `..`) in a noseFS directory
/// descriptor is looked up in that directory, as the kernel does, without walking its path
/// again from the prefix. `None` when the name needs the full walk (a symbolic link to follow).
fn in_directory(
    dir: &fdtable::OpenFile,
    name: &[u8],
    follow_last: bool,
) -> Result<Option<Route>, Errno> {
    if !is_plain_name(name) {
        return Ok(None);
    }
    let found = state::with_service(|s| s.walk_in(dir.handle, &dir.path, name, follow_last))?;
    Ok(found.map(Route::Ours))
}

/// A name the `*at` fast path can look up in its directory: no `/`, not `.` or `..`.
pub fn is_plain_name(name: &[u8]) -> bool {
    !(name.contains(&b'/') || name == b"." || name == b"..")
}

fn c_path(path: Vec<u8>) -> Result<CString, Errno> {
    CString::new(path).map_err(|_| Errno::EINVAL)
}
