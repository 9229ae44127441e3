//! Model-based test: random namespace operations from several threads against the library and
//! against a plain in-memory model of POSIX, with clean and crash remounts between phases and
//! fsck after each. Results (success or errno) and the final trees must match.

use std::collections::{BTreeMap, HashMap};

mod common;

use common::{crash_image, fsck_and_mount, model_cases, track_durable, OWNER};
use nosefs_core::format::layout::{Geometry, MkfsParams};
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::image::Image;
use nosefs_core::namespace::{RenameFlags, SetAttr, XattrMode, ROOT_INO};
use nosefs_core::pmem::Region;
use nosefs_core::Errno;
use proptest::prelude::*;

const THREADS: usize = 2;

/// A path inside a thread's own directory, as name indices.
type Path = Vec<u8>;

fn name(i: u8) -> Vec<u8> {
    match i {
        0 => b"a".to_vec(),
        1 => b"b".to_vec(),
        // Long enough to live in a long-name record.
        _ => [b"long-".as_slice(), &[b'n'; 60]].concat(),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create(Path),
    Mkdir(Path),
    Unlink(Path),
    Rmdir(Path),
    Rename(Path, Path, u8),
    Link(Path, Path),
    Chmod(Path, u32),
    /// setxattr(path, key, size class, flags: 0, XATTR_CREATE, XATTR_REPLACE) on a file.
    SetXattr(Path, u8, u8, i32),
    /// removexattr(path, key) on a file.
    RemoveXattr(Path, u8),
}

/// An attribute name the model uses.
fn xattr_name(key: u8) -> Vec<u8> {
    format!("user.k{key}").into_bytes()
}

/// A value of size class `class`: empty, small, or over a block.
fn xattr_value(key: u8, class: u8) -> Vec<u8> {
    let len = [0, 10, 5000][usize::from(class % 3)];
    vec![key.wrapping_mul(31) ^ class; len]
}

fn path() -> impl Strategy<Value = Path> {
    prop::collection::vec(0u8..3, 1..=3)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => path().prop_map(Op::Create),
        3 => path().prop_map(Op::Mkdir),
        2 => path().prop_map(Op::Unlink),
        2 => path().prop_map(Op::Rmdir),
        3 => (path(), path(), 0u8..3).prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        1 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (path(), 0u32..0o1000).prop_map(|(p, m)| Op::Chmod(p, m)),
        2 => (path(), 0u8..3, 0u8..3, 0i32..3).prop_map(|(p, k, c, f)| Op::SetXattr(p, k, c, f)),
        1 => (path(), 0u8..3).prop_map(|(p, k)| Op::RemoveXattr(p, k)),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { id: u32, mode: u32 },
}

/// The model: one thread's subtree.
#[derive(Debug, Default, Clone)]
struct Model {
    nodes: BTreeMap<Path, Node>,
    next_id: u32,
    /// Extended attributes of each file, by its id: key → value.
    xattrs: BTreeMap<u32, BTreeMap<u8, Vec<u8>>>,
}

type Res = Result<(), Errno>;

impl Model {
    /// ENOENT / ENOTDIR for a missing or non-directory parent of `p`.
    fn parent_ok(&self, p: &[u8]) -> Res {
        for depth in 1..p.len() {
            match self.nodes.get(&p[..depth]) {
                None => return Err(Errno::ENOENT),
                Some(Node::File { .. }) => return Err(Errno::ENOTDIR),
                Some(Node::Dir) => {}
            }
        }
        Ok(())
    }

    fn has_children(&self, p: &[u8]) -> bool {
        self.nodes
            .keys()
            .any(|k| k.len() > p.len() && k.starts_with(p))
    }

    fn apply(&mut self, op: &Op) -> Res {
        match op {
            Op::Create(p) | Op::Mkdir(p) => {
                self.parent_ok(p)?;
                if self.nodes.contains_key(p) {
                    return Err(Errno::EEXIST);
                }
                let node = if matches!(op, Op::Mkdir(_)) {
                    Node::Dir
                } else {
                    self.next_id += 1;
                    Node::File {
                        id: self.next_id,
                        mode: 0o644,
                    }
                };
                self.nodes.insert(p.clone(), node);
                Ok(())
            }
            Op::Unlink(p) => {
                self.parent_ok(p)?;
                match self.nodes.get(p) {
                    None => Err(Errno::ENOENT),
                    Some(Node::Dir) => Err(Errno::EISDIR),
                    Some(_) => {
                        self.nodes.remove(p);
                        Ok(())
                    }
                }
            }
            Op::Rmdir(p) => {
                self.parent_ok(p)?;
                match self.nodes.get(p) {
                    None => Err(Errno::ENOENT),
                    Some(Node::File { .. }) => Err(Errno::ENOTDIR),
                    Some(Node::Dir) if self.has_children(p) => Err(Errno::ENOTEMPTY),
                    Some(Node::Dir) => {
                        self.nodes.remove(p);
                        Ok(())
                    }
                }
            }
            Op::Link(src, dst) => {
                self.parent_ok(src)?;
                let node = self.nodes.get(src).cloned().ok_or(Errno::ENOENT)?;
                self.parent_ok(dst)?;
                if node == Node::Dir {
                    return Err(Errno::EPERM);
                }
                if self.nodes.contains_key(dst) {
                    return Err(Errno::EEXIST);
                }
                self.nodes.insert(dst.clone(), node);
                Ok(())
            }
            Op::Chmod(p, mode) => {
                self.parent_ok(p)?;
                match self.nodes.get(p).cloned() {
                    None => Err(Errno::ENOENT),
                    Some(Node::Dir) => Ok(()),
                    Some(Node::File { id, .. }) => {
                        for n in self.nodes.values_mut() {
                            if let Node::File { id: other, mode: m } = n {
                                if *other == id {
                                    *m = *mode;
                                }
                            }
                        }
                        Ok(())
                    }
                }
            }
            Op::Rename(src, dst, flags) => self.rename(src, dst, *flags),
            Op::SetXattr(p, key, class, flags) => {
                self.parent_ok(p)?;
                let Some(Node::File { id, .. }) = self.nodes.get(p).cloned() else {
                    return self.nodes.get(p).map(drop).ok_or(Errno::ENOENT); // dirs: not modelled
                };
                let set = self.xattrs.entry(id).or_default();
                match (*flags, set.contains_key(key)) {
                    (1, true) => return Err(Errno::EEXIST),
                    (2, false) => return Err(Errno(libc::ENODATA)),
                    _ => {}
                }
                set.insert(*key, xattr_value(*key, *class));
                Ok(())
            }
            Op::RemoveXattr(p, key) => {
                self.parent_ok(p)?;
                let Some(Node::File { id, .. }) = self.nodes.get(p).cloned() else {
                    return self.nodes.get(p).map(drop).ok_or(Errno::ENOENT);
                };
                let set = self.xattrs.entry(id).or_default();
                set.remove(key).map(drop).ok_or(Errno(libc::ENODATA))
            }
        }
    }

    fn rename(&mut self, src: &Path, dst: &Path, flags: u8) -> Res {
        // As renameat2: both parents are resolved before the source is looked up.
        self.parent_ok(src)?;
        self.parent_ok(dst)?;
        let s = self.nodes.get(src).cloned().ok_or(Errno::ENOENT)?;
        let d = self.nodes.get(dst).cloned();
        let (noreplace, exchange) = (flags == 1, flags == 2);
        if src == dst {
            return if noreplace {
                Err(Errno::EEXIST)
            } else {
                Ok(())
            };
        }
        if exchange && d.is_none() {
            return Err(Errno::ENOENT);
        }
        if noreplace && d.is_some() {
            return Err(Errno::EEXIST);
        }
        if let (Node::File { id: a, .. }, Some(Node::File { id: b, .. })) = (&s, &d) {
            if a == b {
                return Ok(()); // two names of one file
            }
        }
        if s == Node::Dir && dst.starts_with(src) {
            return Err(Errno::EINVAL);
        }
        // The kernel checks "target is an ancestor of the source" before the
        // types: ENOTEMPTY for a plain rename, EINVAL for an exchange.
        if !exchange && src.starts_with(dst) {
            return Err(Errno::ENOTEMPTY);
        }
        if exchange {
            if d == Some(Node::Dir) && src.starts_with(dst) {
                return Err(Errno::EINVAL);
            }
            return self.exchange(src, dst);
        }
        match (&s, &d) {
            (Node::Dir, Some(Node::File { .. })) => return Err(Errno::ENOTDIR),
            (Node::File { .. }, Some(Node::Dir)) => return Err(Errno::EISDIR),
            (Node::Dir, Some(Node::Dir)) if self.has_children(dst) => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        self.nodes.remove(dst);
        self.move_subtree(src, dst);
        Ok(())
    }

    fn move_subtree(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(Path, Node)> = self
            .nodes
            .iter()
            .filter(|(k, _)| k.starts_with(from))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, _) in &moved {
            self.nodes.remove(k);
        }
        for (k, v) in moved {
            let mut nk = to.clone();
            nk.extend_from_slice(&k[from.len()..]);
            self.nodes.insert(nk, v);
        }
    }

    fn exchange(&mut self, a: &Path, b: &Path) -> Res {
        let tmp = vec![99u8];
        self.move_subtree(a, &tmp);
        self.move_subtree(b, a);
        self.move_subtree(&tmp, b);
        Ok(())
    }
}

fn fs_path(thread: usize, p: &[u8]) -> Vec<u8> {
    let mut out = format!("/t{thread}").into_bytes();
    for &c in p {
        out.push(b'/');
        out.extend(name(c));
    }
    out
}

fn split(thread: usize, p: &[u8]) -> (Vec<u8>, Vec<u8>) {
    (fs_path(thread, &p[..p.len() - 1]), name(p[p.len() - 1]))
}

/// Runs `op` on the file system through path resolution, as a frontend would.
fn run(fs: &Fs, thread: usize, op: &Op) -> Res {
    let dir = |p: &[u8]| -> Result<u64, Errno> {
        let (parent, _) = split(thread, p);
        let attr = fs.resolve(ROOT_INO, &parent, true).map_err(|e| e.errno())?;
        if !attr.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok(attr.ino)
    };
    let last = |p: &[u8]| name(p[p.len() - 1]);
    let e = |r: nosefs_core::Result<()>| r.map_err(|e| e.errno());
    match op {
        Op::Create(p) => e(fs.create(dir(p)?, &last(p), 0o644, OWNER, true).map(drop)),
        Op::Mkdir(p) => e(fs.mkdir(dir(p)?, &last(p), 0o755, OWNER).map(drop)),
        Op::Unlink(p) => e(fs.unlink(dir(p)?, &last(p))),
        Op::Rmdir(p) => e(fs.rmdir(dir(p)?, &last(p))),
        Op::Link(src, dst) => {
            let s = fs.lookup(dir(src)?, &last(src)).map_err(|e| e.errno())?;
            e(fs.link(s.ino, dir(dst)?, &last(dst)).map(drop))
        }
        Op::Chmod(p, mode) => {
            let a = fs.lookup(dir(p)?, &last(p)).map_err(|e| e.errno())?;
            let change = SetAttr {
                mode: Some(*mode),
                ..SetAttr::default()
            };
            e(fs.setattr(a.ino, &change).map(drop))
        }
        Op::SetXattr(p, key, class, flags) => {
            let a = fs.lookup(dir(p)?, &last(p)).map_err(|e| e.errno())?;
            if a.is_dir() {
                return Ok(()); // not modelled (the unit tests cover directories)
            }
            let mode = XattrMode::from_flags(*flags).unwrap();
            e(fs.setxattr(a.ino, &xattr_name(*key), &xattr_value(*key, *class), mode))
        }
        Op::RemoveXattr(p, key) => {
            let a = fs.lookup(dir(p)?, &last(p)).map_err(|e| e.errno())?;
            if a.is_dir() {
                return Ok(());
            }
            e(fs.removexattr(a.ino, &xattr_name(*key)))
        }
        Op::Rename(src, dst, flags) => {
            let f = RenameFlags {
                noreplace: *flags == 1,
                exchange: *flags == 2,
                ..RenameFlags::default()
            };
            let (sd, dd) = (dir(src)?, dir(dst)?);
            e(fs.rename(sd, &last(src), dd, &last(dst), f))
        }
    }
}

/// The file system's subtree of one thread: path → (is_dir, permission bits, ino).
fn fs_tree(fs: &Fs, thread: usize) -> BTreeMap<Path, (bool, u32, u64)> {
    let mut out = BTreeMap::new();
    let top = fs
        .resolve(ROOT_INO, format!("/t{thread}").as_bytes(), true)
        .unwrap()
        .ino;
    walk(fs, top, &[], &mut out);
    out
}

fn walk(fs: &Fs, dir: u64, prefix: &[u8], out: &mut BTreeMap<Path, (bool, u32, u64)>) {
    let mut entries = Vec::new();
    fs.readdir(dir, 0, |e| {
        entries.push(e);
        true
    })
    .unwrap();
    for e in entries.into_iter().skip(2) {
        let index = (0u8..3)
            .find(|&i| name(i) == e.name)
            .expect("only model names exist");
        let mut p = prefix.to_vec();
        p.push(index);
        let a = fs.getattr(e.ino).unwrap();
        out.insert(p.clone(), (a.is_dir(), a.mode & 0o7777, a.ino));
        if a.is_dir() {
            walk(fs, e.ino, &p, out);
        }
    }
}

fn compare(fs: &Fs, thread: usize, model: &Model) {
    let tree = fs_tree(fs, thread);
    let paths: Vec<&Path> = tree.keys().collect();
    let model_paths: Vec<&Path> = model.nodes.keys().collect();
    assert_eq!(
        paths, model_paths,
        "thread {thread}: names differ; model {:?}",
        model.nodes
    );
    let mut ino_of_id: HashMap<u32, u64> = HashMap::new();
    for (p, node) in &model.nodes {
        let (is_dir, perm, ino) = tree[p];
        match node {
            Node::Dir => assert!(is_dir, "{p:?} should be a directory"),
            Node::File { id, mode } => {
                assert!(
                    !is_dir && perm == *mode,
                    "{p:?}: mode {perm:o} vs model {mode:o}"
                );
                let known = *ino_of_id.entry(*id).or_insert(ino);
                assert_eq!(known, ino, "{p:?}: hard links must share an inode");
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .xattrs
                    .get(id)
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (xattr_name(*k), v.clone()))
                    .collect();
                let list = fs.listxattr(ino).unwrap();
                let mut got: Vec<(Vec<u8>, Vec<u8>)> = list
                    .split(|&b| b == 0)
                    .filter(|n| !n.is_empty())
                    .map(|n| (n.to_vec(), fs.getxattr(ino, n).unwrap()))
                    .collect();
                got.sort();
                assert_eq!(got, want, "{p:?}: extended attributes");
            }
        }
    }
    let distinct: std::collections::HashSet<u64> = ino_of_id.values().copied().collect();
    assert_eq!(
        distinct.len(),
        ino_of_id.len(),
        "different files must not share an inode"
    );
}

fn mount_bytes(bytes: &[u8]) -> Fs {
    track_durable(fsck_and_mount(bytes, THREADS))
}

fn fresh_fs() -> Fs {
    let params = MkfsParams {
        image_bytes: 4 << 20,
        ..MkfsParams::default()
    };
    let mut g = Geometry::for_mkfs(&params).unwrap();
    g.hash_seed = 99;
    let region = Region::recording(params.image_bytes).unwrap();
    nosefs_core::mkfs::format_region(&region, &g, (0, 0)).unwrap();
    let fs = track_durable(
        Fs::mount_image(
            Image::from_region(region).unwrap(),
            &MountOptions::default(),
        )
        .unwrap(),
    );
    for t in 0..THREADS {
        fs.mkdir(ROOT_INO, format!("t{t}").as_bytes(), 0o755, OWNER)
            .unwrap();
    }
    fs
}

/// Phases of per-thread operation lists, each ending with a clean (true) or crash remount.
fn phases() -> impl Strategy<Value = Vec<(Vec<Vec<Op>>, bool)>> {
    let per_thread = prop::collection::vec(prop::collection::vec(op(), 0..25), THREADS);
    prop::collection::vec((per_thread, any::<bool>()), 1..4)
}

proptest! {
    // CI runs 48 cases; NOSEFS_MODEL_CASES=2000 runs a long variant.
    #![proptest_config(ProptestConfig::with_cases(model_cases(48)))]

    #[test]
    fn namespace_matches_the_model(phases in phases()) {
        let mut fs = fresh_fs();
        let mut models = vec![Model::default(); THREADS];
        for (lists, clean) in phases {
            std::thread::scope(|scope| {
                for (t, (ops, model)) in lists.iter().zip(models.iter_mut()).enumerate() {
                    let fs = &fs;
                    scope.spawn(move || {
                        for (i, op) in ops.iter().enumerate() {
                            let want = model.apply(op);
                            let got = run(fs, t, op);
                            assert_eq!(got, want, "thread {t} op {i}: {op:?}");
                            // Subtrees are disjoint, so this is safe while other threads run.
                            compare(fs, t, model);
                        }
                    });
                }
            });
            for (t, model) in models.iter().enumerate() {
                compare(&fs, t, model);
            }
            let bytes = if clean { fs.unmount().into_region().snapshot() } else { crash_image(&fs) };
            fs = mount_bytes(&bytes);
            for (t, model) in models.iter().enumerate() {
                compare(&fs, t, model);
            }
        }
    }
}
