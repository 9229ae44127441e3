//! The oracle's view of a file system: every name with what a user can observe of it.

use std::collections::BTreeMap;

use nosefs_core::namespace::{Fs, ROOT_INO};

/// One name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// File type and permission bits.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Size (directories report a constant).
    pub size: u64,
    /// Modification time (set explicitly by utimens in the workloads).
    pub mtime_ns: i64,
    /// The target, for a symbolic link.
    pub target: Option<Vec<u8>>,
    /// Another path that names the same inode, if any (hard links), as the lowest such path.
    pub same_as: Option<String>,
}

/// Path → node, for the whole tree.
pub type Tree = BTreeMap<String, Node>;

/// Reads the whole tree through the public API. Directory times are left out: they are derived
/// state that a crash may leave one operation behind.
pub fn tree_of(fs: &Fs) -> Tree {
    let mut out = Tree::new();
    let mut inos: BTreeMap<u64, String> = BTreeMap::new();
    walk(fs, ROOT_INO, "", &mut out, &mut inos);
    out
}

fn walk(fs: &Fs, dir: u64, prefix: &str, out: &mut Tree, inos: &mut BTreeMap<u64, String>) {
    let mut entries = Vec::new();
    fs.readdir(dir, 0, |e| {
        entries.push(e);
        true
    })
    .expect("readdir of a listed directory");
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
    {
        let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
        let a = fs.getattr(e.ino).expect("getattr of a listed name");
        let is_link = a.mode & 0o170000 == 0o120000;
        let is_dir = a.is_dir();
        let same_as = if is_dir {
            None
        } else {
            inos.get(&e.ino).cloned()
        };
        if same_as.is_none() && !is_dir {
            inos.insert(e.ino, path.clone());
        }
        let node = Node {
            mode: a.mode,
            nlink: a.nlink,
            size: a.size,
            mtime_ns: if is_dir { 0 } else { a.mtime_ns },
            target: is_link.then(|| fs.readlink(e.ino).expect("readlink of a symlink")),
            same_as,
        };
        out.insert(path.clone(), node);
        if is_dir {
            walk(fs, e.ino, &path, out, inos);
        }
    }
}
