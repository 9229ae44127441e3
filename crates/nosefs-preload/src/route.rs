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

use nosefs_core::namespace::perm::{self, MAY_EXEC};
use nosefs_core::namespace::{Attr, Fs, MAX_SYMLINKS, ROOT_INO};
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
#[derive(Debug, Clone)]
pub struct Found {
    /// The directory holding the last component.
    pub parent: u64,
    /// Its attributes.
    pub parent_attr: Attr,
    /// The last component (`.` for the noseFS root itself).
    pub name: Vec<u8>,
    /// The object, if it exists (after the last symlink, when following).
    pub attr: Option<Attr>,
    /// The absolute logical path (the prefix, then the components inside).
    pub path: Vec<u8>,
    /// The path ended with a slash (the object must be a directory).
    pub trailing_slash: bool,
}

impl Found {
    /// The object, or ENOENT.
    pub fn existing(&self) -> Result<Attr, Errno> {
        self.attr.ok_or(Errno::ENOENT)
    }
}

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

fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

fn starts_with_prefix(path: &[u8], prefix: &[u8]) -> bool {
    path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/')
}

/// Routes `path` relative to `dirfd` (AT_FDCWD or a descriptor). `follow_last` follows a
/// symbolic link in the last component.
pub fn route(dirfd: i32, path: &[u8], follow_last: bool) -> Result<Route, Errno> {
    let Some(config) = state::config() else {
        return Ok(Route::Kernel(None));
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
            return Ok(Route::Kernel(None)); // the common case for kernel paths
        }
        path.to_vec()
    } else if dirfd == libc::AT_FDCWD {
        match cwd() {
            Some(cwd) => join(&cwd, path),
            None => {
                // A relative path from a kernel directory reaches noseFS only through `..` or
                // by naming the prefix's components.
                let Some(kcwd) = kernel_cwd() else {
                    return Ok(Route::Kernel(None));
                };
                let joined = join(&kcwd, path);
                if !starts_with_prefix(&lexical(&joined), &config.prefix) {
                    return Ok(Route::Kernel(None));
                }
                joined
            }
        }
    } else {
        match fdtable::get(dirfd) {
            Some(dir) if dir.kind == Kind::Dir || dir.kind == Kind::Path => {
                if let Some(route) = in_directory(&dir, path, follow_last)? {
                    return Ok(route);
                }
                join(&dir.path, path)
            }
            Some(_) => return Err(Errno::ENOTDIR),
            None => return Ok(Route::Kernel(None)),
        }
    };
    let normal = lexical_outside(&absolute, &config.prefix);
    if !starts_with_prefix(&normal, &config.prefix) {
        return Ok(Route::Kernel(None));
    }
    state::with_fs(|fs| walk(fs, &config.prefix, normal, follow_last))
}

/// The fast path of `*at` calls: one plain name (no `/`, not `.` or `..`) in a noseFS directory
/// descriptor is looked up in that directory's inode, as the kernel does, without walking its
/// path again from the prefix. `None` when the name needs the full walk (a symbolic link to
/// follow, or a directory that is not a directory any more).
fn in_directory(
    dir: &fdtable::OpenFile,
    name: &[u8],
    follow_last: bool,
) -> Result<Option<Route>, Errno> {
    if name.contains(&b'/') || name == b"." || name == b".." {
        return Ok(None);
    }
    state::with_fs(|fs| {
        let dir_attr = fs.getattr(dir.ino).map_err(|e| e.errno())?;
        if !dir_attr.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        perm::check(&dir_attr, &state::cred(), MAY_EXEC).map_err(|e| e.errno())?;
        let attr = match fs.lookup(dir.ino, name) {
            Ok(a) => Some(a),
            Err(e) if e.errno() == Errno::ENOENT => None,
            Err(e) => return Err(e.errno()),
        };
        if follow_last && attr.is_some_and(|a| a.mode & libc::S_IFMT == libc::S_IFLNK) {
            return Ok(None);
        }
        Ok(Some(Route::Ours(Found {
            parent: dir.ino,
            parent_attr: dir_attr,
            name: name.to_vec(),
            attr,
            path: join(&dir.path, name),
            trailing_slash: false,
        })))
    })
}

fn join(base: &[u8], path: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(path);
    out
}

/// `.` and `..` removed lexically (for deciding whether a kernel-side path enters the prefix).
fn lexical(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in components(path) {
        match c {
            b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    if path.ends_with(b"/") && out.len() > 1 {
        out.push(b'/');
    }
    out
}

/// Lexical normalisation of the part of `path` before it enters the prefix; inside the prefix
/// the components are kept for the real walk (where `..` and symlinks are resolved properly).
fn lexical_outside(path: &[u8], prefix: &[u8]) -> Vec<u8> {
    if starts_with_prefix(path, prefix) {
        return path.to_vec();
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut rest = components(path).peekable();
    let prefix_parts: Vec<&[u8]> = components(prefix).collect();
    while let Some(c) = rest.next() {
        match c {
            b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
        if parts == prefix_parts {
            let mut out = prefix.to_vec();
            for c in rest {
                out.push(b'/');
                out.extend_from_slice(c);
            }
            if path.ends_with(b"/") {
                out.push(b'/');
            }
            return out;
        }
    }
    path.to_vec()
}

/// Resolves `path` (absolute, inside the prefix) component by component.
fn walk(fs: &Fs, prefix: &[u8], mut path: Vec<u8>, follow_last: bool) -> Result<Route, Errno> {
    let cred = state::cred();
    let mut budget = MAX_SYMLINKS;
    'restart: loop {
        if !starts_with_prefix(&path, prefix) {
            let normal = lexical_outside(&path, prefix);
            if !starts_with_prefix(&normal, prefix) {
                return Ok(Route::Kernel(Some(c_path(normal)?)));
            }
            path = normal;
        }
        let trailing_slash = path.ends_with(b"/");
        let inside: Vec<Vec<u8>> = components(&path[prefix.len()..])
            .map(<[u8]>::to_vec)
            .collect();
        let mut queue: std::collections::VecDeque<Vec<u8>> = inside.into();
        // The logical path of the current directory, as a stack of components.
        let mut logical: Vec<Vec<u8>> = Vec::new();
        let mut dir = ROOT_INO;
        let mut dir_attr = fs.getattr(ROOT_INO).map_err(|e| e.errno())?;
        let mut ancestors: Vec<(u64, Attr)> = Vec::new();
        while let Some(name) = queue.pop_front() {
            let last = queue.is_empty();
            if name == b"." {
                continue; // when last, the loop ends and names this directory
            }
            if name == b".." {
                let Some((up, up_attr)) = ancestors.pop() else {
                    // `..` at the noseFS root leaves the prefix: the rest goes to the kernel.
                    let mut out = prefix.to_vec();
                    out.extend_from_slice(b"/..");
                    push_components(&mut out, queue);
                    path = lexical(&out);
                    continue 'restart;
                };
                logical.pop();
                dir = up;
                dir_attr = up_attr;
                continue; // when last, the loop ends and names this directory
            }
            perm::check(&dir_attr, &cred, MAY_EXEC).map_err(|e| e.errno())?;
            let attr = match fs.lookup(dir, &name) {
                Ok(a) => Some(a),
                Err(e) if e.errno() == Errno::ENOENT => None,
                Err(e) => return Err(e.errno()),
            };
            let is_link = attr.is_some_and(|a| a.mode & libc::S_IFMT == libc::S_IFLNK);
            if is_link && (!last || follow_last || trailing_slash) {
                budget = budget.checked_sub(1).ok_or(Errno::ELOOP)?;
                let target = fs
                    .readlink(attr.map_or(0, |a| a.ino))
                    .map_err(|e| e.errno())?;
                if target.starts_with(b"/") {
                    let mut out = target;
                    push_components(&mut out, queue);
                    if trailing_slash {
                        out.push(b'/');
                    }
                    path = out;
                    continue 'restart;
                }
                for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    queue.push_front(c.to_vec());
                }
                continue;
            }
            if last {
                return Ok(found(
                    prefix,
                    &logical,
                    dir,
                    dir_attr,
                    &name,
                    attr,
                    trailing_slash,
                ));
            }
            let attr = attr.ok_or(Errno::ENOENT)?;
            if !attr.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            ancestors.push((dir, dir_attr));
            logical.push(name);
            dir = attr.ino;
            dir_attr = attr;
        }
        // The path ended at a directory: the noseFS root, or one reached by `.` or `..`.
        return Ok(found(
            prefix,
            &logical,
            dir,
            dir_attr,
            b".",
            Some(dir_attr),
            trailing_slash,
        ));
    }
}

/// Appends the components still to be walked to a path.
fn push_components(out: &mut Vec<u8>, rest: impl IntoIterator<Item = Vec<u8>>) {
    for c in rest {
        out.push(b'/');
        out.extend_from_slice(&c);
    }
}

fn found(
    prefix: &[u8],
    logical: &[Vec<u8>],
    parent: u64,
    parent_attr: Attr,
    name: &[u8],
    attr: Option<Attr>,
    trailing_slash: bool,
) -> Route {
    let mut path = prefix.to_vec();
    for c in logical {
        path.push(b'/');
        path.extend_from_slice(c);
    }
    if name != b"." {
        path.push(b'/');
        path.extend_from_slice(name);
    }
    Route::Ours(Found {
        parent,
        parent_attr,
        name: name.to_vec(),
        attr,
        path,
        trailing_slash,
    })
}

fn c_path(path: Vec<u8>) -> Result<CString, Errno> {
    CString::new(path).map_err(|_| Errno::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_removes_dots() {
        assert_eq!(lexical(b"/a/./b/../c"), b"/a/c");
        assert_eq!(lexical(b"/.."), b"/");
        assert_eq!(lexical(b"/a/b/"), b"/a/b/");
    }

    #[test]
    fn paths_entering_the_prefix_are_found_lexically() {
        assert_eq!(
            lexical_outside(b"/mnt/x/../nose/a/../b", b"/mnt/nose"),
            b"/mnt/nose/a/../b"
        );
        assert_eq!(
            lexical_outside(b"/mnt/other/f", b"/mnt/nose"),
            b"/mnt/other/f"
        );
        assert!(starts_with_prefix(b"/mnt/nose", b"/mnt/nose"));
        assert!(starts_with_prefix(b"/mnt/nose/x", b"/mnt/nose"));
        assert!(!starts_with_prefix(b"/mnt/nosey", b"/mnt/nose"));
    }
}
