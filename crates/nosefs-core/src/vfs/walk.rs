//! Path resolution, as the kernel's `link_path_walk`: every component looked up by the core,
//! search permission checked on each directory, symbolic links followed (at most
//! [`MAX_SYMLINKS`]; an absolute target starts over, and may leave noseFS), `..` at the noseFS
//! root leaving the prefix.

use std::collections::VecDeque;

use super::{core, Found};
use crate::format::pinode;
use crate::fs::Fs;
use crate::namespace::perm::{Cred, MAY_EXEC};
use crate::namespace::{Attr, MAX_SYMLINKS, ROOT_INO};
use crate::Errno;

/// Where a logical path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walked {
    /// A name inside noseFS.
    Found(Found),
    /// Resolution left noseFS: the kernel should be given this absolute path instead.
    Outside(Vec<u8>),
}

/// The non-empty components of a path.
pub fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

/// Whether `path` is `prefix` or below it (component-wise: `/mnt/nosey` is not below `/mnt/nose`).
pub fn starts_with_prefix(path: &[u8], prefix: &[u8]) -> bool {
    path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/')
}

/// `base` and `path` joined with one slash.
pub fn join(base: &[u8], path: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(path);
    out
}

/// `.` and `..` removed lexically (for deciding whether a kernel-side path enters the prefix).
pub fn lexical(path: &[u8]) -> Vec<u8> {
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
pub fn lexical_outside(path: &[u8], prefix: &[u8]) -> Vec<u8> {
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

fn is_symlink(attr: Option<Attr>) -> bool {
    attr.is_some_and(|a| a.mode & pinode::S_IFMT == pinode::S_IFLNK)
}

fn lookup(fs: &Fs, dir: u64, name: &[u8]) -> Result<Option<Attr>, Errno> {
    match fs.lookup(dir, name) {
        Ok(a) => Ok(Some(a)),
        Err(e) if e.errno() == Errno::ENOENT => Ok(None),
        Err(e) => Err(e.errno()),
    }
}

/// Longest absolute path [`walk`] resolves: a working directory many PATH_MAXes deep, and a
/// relative path under it.
pub const WALK_BYTES_MAX: usize = 16 * libc::PATH_MAX as usize;

/// Resolves `path` (absolute; it need not be inside `prefix`, which is noseFS's root as the
/// caller sees it) component by component. `follow_last` follows a symbolic link in the last
/// component.
pub fn walk(
    fs: &Fs,
    cred: &Cred,
    prefix: &[u8],
    mut path: Vec<u8>,
    follow_last: bool,
) -> Result<Walked, Errno> {
    // The caller's own string was held to PATH_MAX by its frontend, as the kernel holds it; a
    // relative one joined to a deep working directory may be longer, and the kernel resolves
    // it all the same (from the directory it holds). This bound only keeps a hostile client's
    // request from costing without end.
    if path.len() >= WALK_BYTES_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut budget = MAX_SYMLINKS;
    'restart: loop {
        if !starts_with_prefix(&path, prefix) {
            let normal = lexical_outside(&path, prefix);
            if !starts_with_prefix(&normal, prefix) {
                return Ok(Walked::Outside(normal));
            }
            path = normal;
        }
        let trailing_slash = path.ends_with(b"/");
        let mut queue: VecDeque<Vec<u8>> = components(&path[prefix.len()..])
            .map(<[u8]>::to_vec)
            .collect();
        // The logical path of the current directory, as a stack of components.
        let mut logical: Vec<Vec<u8>> = Vec::new();
        let mut dir = ROOT_INO;
        let mut dir_attr = core(fs.getattr(ROOT_INO))?;
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
            core(fs.check_permission(&dir_attr, cred, MAY_EXEC))?;
            let attr = lookup(fs, dir, &name)?;
            if is_symlink(attr) && (!last || follow_last || trailing_slash) {
                budget = budget.checked_sub(1).ok_or(Errno::ELOOP)?;
                let target = core(fs.readlink(attr.map_or(0, |a| a.ino)))?;
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
                return Ok(Walked::Found(found(
                    prefix,
                    &logical,
                    (dir, dir_attr),
                    &name,
                    attr,
                    trailing_slash,
                )));
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
        return Ok(Walked::Found(found(
            prefix,
            &logical,
            (dir, dir_attr),
            b".",
            Some(dir_attr),
            trailing_slash,
        )));
    }
}

/// The fast path of `*at` calls: one plain name (no `/`, not `.` or `..`) in directory `dir`
/// (which the caller holds open; `dir_path` is its logical path) is looked up there, as the
/// kernel does, without walking the directory's path again. `None` when the name needs the full
/// walk (a symbolic link to follow).
pub fn walk_in(
    fs: &Fs,
    cred: &Cred,
    dir: u64,
    dir_path: &[u8],
    name: &[u8],
    follow_last: bool,
) -> Result<Option<Found>, Errno> {
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return Ok(None);
    }
    let dir_attr = core(fs.getattr(dir))?;
    if !dir_attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    core(fs.check_permission(&dir_attr, cred, MAY_EXEC))?;
    let attr = lookup(fs, dir, name)?;
    if follow_last && is_symlink(attr) {
        return Ok(None);
    }
    Ok(Some(Found {
        parent: dir,
        parent_attr: dir_attr,
        name: name.to_vec(),
        attr,
        path: join(dir_path, name),
        trailing_slash: false,
    }))
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
    (parent, parent_attr): (u64, Attr),
    name: &[u8],
    attr: Option<Attr>,
    trailing_slash: bool,
) -> Found {
    let mut path = prefix.to_vec();
    for c in logical {
        path.push(b'/');
        path.extend_from_slice(c);
    }
    if name != b"." {
        path.push(b'/');
        path.extend_from_slice(name);
    }
    Found {
        parent,
        parent_attr,
        name: name.to_vec(),
        attr,
        path,
        trailing_slash,
    }
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
