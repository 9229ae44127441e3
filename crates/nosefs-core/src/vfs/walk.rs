//! Path resolution, as the kernel's `link_path_walk`: every component looked up by the core,
//! search permission checked on each directory, symbolic links followed (at most
//! [`MAX_SYMLINKS`]; an absolute target starts over, and may leave noseFS), `..` at the noseFS
//! root leaving the prefix.

use smallvec::SmallVec;

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
        // The components still to walk are those of `path[at..]`: read in place, so a walk
        // allocates nothing per component (a relative symbolic link's target is spliced in).
        let mut at = prefix.len();
        // The logical path of the current directory below the prefix ("/a/b"), and where each
        // of its components starts, for `..`.
        let mut logical: SmallVec<[u8; 256]> = SmallVec::new();
        let mut logical_starts: SmallVec<[usize; 16]> = SmallVec::new();
        let mut dir = ROOT_INO;
        let mut dir_attr = core(fs.getattr(ROOT_INO))?;
        let mut ancestors: SmallVec<[(u64, Attr); 16]> = SmallVec::new();
        while let Some((start, end)) = next_component(&path, at) {
            at = end;
            let last = next_component(&path, at).is_none();
            let name = &path[start..end];
            if name == b"." {
                continue; // when last, the loop ends and names this directory
            }
            if name == b".." {
                let Some((up, up_attr)) = ancestors.pop() else {
                    // `..` at the noseFS root leaves the prefix: the rest goes to the kernel.
                    let mut out = prefix.to_vec();
                    out.extend_from_slice(b"/..");
                    push_components(&mut out, &path[at..]);
                    path = lexical(&out);
                    continue 'restart;
                };
                logical.truncate(logical_starts.pop().expect("one per ancestor"));
                dir = up;
                dir_attr = up_attr;
                continue; // when last, the loop ends and names this directory
            }
            core(fs.check_permission(&dir_attr, cred, MAY_EXEC))?;
            let attr = lookup(fs, dir, name)?;
            if is_symlink(attr) && (!last || follow_last || trailing_slash) {
                budget = budget.checked_sub(1).ok_or(Errno::ELOOP)?;
                let mut target = core(fs.readlink(attr.map_or(0, |a| a.ino)))?;
                if target.starts_with(b"/") {
                    push_components(&mut target, &path[at..]);
                    if trailing_slash {
                        target.push(b'/');
                    }
                    path = target;
                    continue 'restart;
                }
                target.push(b'/');
                target.extend_from_slice(&path[at..]);
                path = target;
                at = 0;
                continue;
            }
            if last {
                return Ok(Walked::Found(found(
                    prefix,
                    &logical,
                    (dir, dir_attr),
                    name,
                    attr,
                    trailing_slash,
                )));
            }
            let attr = attr.ok_or(Errno::ENOENT)?;
            if !attr.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            ancestors.push((dir, dir_attr));
            logical_starts.push(logical.len());
            logical.push(b'/');
            logical.extend_from_slice(name);
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

/// The next non-empty component of `path` from byte `at`, as its byte range.
fn next_component(path: &[u8], at: usize) -> Option<(usize, usize)> {
    let rest = path.get(at..)?;
    let start = at + rest.iter().position(|&b| b != b'/')?;
    let end = path[start..]
        .iter()
        .position(|&b| b == b'/')
        .map_or(path.len(), |n| start + n);
    Some((start, end))
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

/// Appends the components still to be walked (those of `rest`, each after one slash) to a path.
fn push_components(out: &mut Vec<u8>, rest: &[u8]) {
    for c in components(rest) {
        out.push(b'/');
        out.extend_from_slice(c);
    }
}

/// What a walk found: `logical` is the parent's path below the prefix ("/a/b").
fn found(
    prefix: &[u8],
    logical: &[u8],
    (parent, parent_attr): (u64, Attr),
    name: &[u8],
    attr: Option<Attr>,
    trailing_slash: bool,
) -> Found {
    let mut path = Vec::with_capacity(prefix.len() + logical.len() + 1 + name.len());
    path.extend_from_slice(prefix);
    path.extend_from_slice(logical);
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
    use crate::namespace::tests::{fresh, OWNER};

    const P: &[u8] = b"/mnt/nose";

    /// A tree: /a/b (directories), /a/b/f (a file), /a/up -> .. , /a/abs -> /mnt/nose/a/b,
    /// /a/out -> /etc, /a/loop -> loop, /a/rel -> b/f, /a/dots -> ./b/../b//f.
    fn tree(fs: &Fs) -> (u64, u64, u64) {
        let a = fs.mkdir(ROOT_INO, b"a", 0o755, OWNER).unwrap().ino;
        let b = fs.mkdir(a, b"b", 0o755, OWNER).unwrap().ino;
        let f = fs.create(b, b"f", 0o644, OWNER, true).unwrap().ino;
        for (name, target) in [
            (&b"up"[..], &b".."[..]),
            (b"abs", b"/mnt/nose/a/b"),
            (b"out", b"/etc"),
            (b"loop", b"loop"),
            (b"rel", b"b/f"),
            (b"dots", b"./b/../b//f"),
        ] {
            fs.symlink(a, name, target, OWNER).unwrap();
        }
        (a, b, f)
    }

    fn found(fs: &Fs, path: &[u8], follow: bool) -> Found {
        match walk(fs, &Cred::root(), P, path.to_vec(), follow) {
            Ok(Walked::Found(found)) => found,
            other => panic!("{}: {other:?}", String::from_utf8_lossy(path)),
        }
    }

    fn error(fs: &Fs, path: &[u8]) -> Errno {
        walk(fs, &Cred::root(), P, path.to_vec(), true).unwrap_err()
    }

    #[test]
    fn a_walk_resolves_components_dots_and_symbolic_links_as_the_kernel_does() {
        let h = fresh(None);
        let fs = h.fs();
        let (a, b, f) = tree(fs);
        let plain = found(fs, b"/mnt/nose/a/b/f", true);
        assert_eq!((plain.parent, plain.attr.map(|x| x.ino)), (b, Some(f)));
        assert_eq!(
            (&plain.name[..], &plain.path[..]),
            (&b"f"[..], &b"/mnt/nose/a/b/f"[..])
        );
        for path in [
            &b"/mnt/nose//a/./b///f"[..],
            b"/mnt/nose/a/b/../b/f",
            b"/mnt/nose/a/rel",
            b"/mnt/nose/a/dots",
            b"/mnt/nose/a/abs/f",
            b"/mnt/nose/a/up/a/b/f",
            b"/mnt/x/../nose/a/b/f",
        ] {
            let got = found(fs, path, true);
            assert_eq!(
                got.attr.map(|x| x.ino),
                Some(f),
                "{}",
                String::from_utf8_lossy(path)
            );
            assert_eq!(
                got.path,
                b"/mnt/nose/a/b/f",
                "{}",
                String::from_utf8_lossy(path)
            );
            assert!(!got.trailing_slash);
        }
        // The last component not followed: the link itself, in its directory.
        let link = found(fs, b"/mnt/nose/a/rel", false);
        assert_eq!((link.parent, &link.name[..]), (a, &b"rel"[..]));
        assert_eq!(link.path, b"/mnt/nose/a/rel");
        // A directory named by the path itself, and a missing last name.
        let dir = found(fs, b"/mnt/nose/a/b/..", true);
        assert_eq!(
            (dir.attr.map(|x| x.ino), &dir.name[..]),
            (Some(a), &b"."[..])
        );
        assert_eq!(dir.path, b"/mnt/nose/a");
        let root = found(fs, b"/mnt/nose", true);
        assert_eq!(
            (root.attr.map(|x| x.ino), &root.path[..]),
            (Some(ROOT_INO), P)
        );
        let missing = found(fs, b"/mnt/nose/a/b/new", true);
        assert_eq!((missing.parent, missing.attr), (b, None));
        let slash = found(fs, b"/mnt/nose/a/abs/", true);
        assert_eq!(
            (slash.attr.map(|x| x.ino), slash.trailing_slash),
            (Some(b), true)
        );
        assert_eq!(slash.path, b"/mnt/nose/a/b");
    }

    #[test]
    fn a_walk_leaves_no_sooner_than_the_kernel_would_and_fails_as_it_would() {
        let h = fresh(None);
        let fs = h.fs();
        tree(fs);
        let outside = |path: &[u8]| walk(fs, &Cred::root(), P, path.to_vec(), true);
        assert_eq!(
            outside(b"/mnt/nose/a/out/passwd"),
            Ok(Walked::Outside(b"/etc/passwd".to_vec()))
        );
        assert_eq!(
            outside(b"/mnt/nose/../x/y"),
            Ok(Walked::Outside(b"/mnt/x/y".to_vec()))
        );
        assert_eq!(
            outside(b"/mnt/nose/a/up/../z"),
            Ok(Walked::Outside(b"/mnt/z".to_vec()))
        );
        assert_eq!(outside(b"/tmp/f"), Ok(Walked::Outside(b"/tmp/f".to_vec())));
        assert_eq!(error(fs, b"/mnt/nose/a/loop"), Errno::ELOOP);
        assert_eq!(error(fs, b"/mnt/nose/a/b/f/g"), Errno::ENOTDIR);
        assert_eq!(error(fs, b"/mnt/nose/a/rel/g"), Errno::ENOTDIR);
        assert_eq!(error(fs, b"/mnt/nose/a/missing/g"), Errno::ENOENT);
        let long = [&b"/mnt/nose/"[..], &vec![b'a'; WALK_BYTES_MAX][..]].concat();
        assert_eq!(error(fs, &long), Errno::ENAMETOOLONG);
    }

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
