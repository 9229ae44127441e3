//! The oracle's view of a file system: every name with what a user can observe of it.

use std::collections::{BTreeMap, HashMap};

use nosefs_core::fs::Fs;
use nosefs_core::namespace::ROOT_INO;

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
    /// CRC-32C of a regular file's contents (0 for anything else).
    pub content: u32,
    /// CRC-32C of its extended attributes, names and values in name order (0: none).
    pub xattrs: u32,
    /// The ranges fallocate reserved in a regular file. A change that cuts or moves them (punch,
    /// truncate, collapse, insert) stores them in a commit after the file's own, so the oracle
    /// checks them on their own: old or new (see `same_but_reserved`).
    pub reserved: Vec<(u64, u64)>,
}

/// Whether two trees are equal but for the reserved ranges.
pub fn same_but_reserved(a: &Tree, b: &Tree) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((pa, na), (pb, nb))| {
            pa == pb
                && Node {
                    reserved: Vec::new(),
                    ..na.clone()
                } == Node {
                    reserved: Vec::new(),
                    ..nb.clone()
                }
        })
}

/// What a regular file's durable state is while it has writes since its last commit: the
/// checker records it before the first such write, since the live file system shows the writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileData {
    /// Size.
    pub size: u64,
    /// Modification time.
    pub mtime_ns: i64,
    /// CRC-32C of the contents.
    pub content: u32,
}

/// A regular file's size, time and contents as the file system shows them now.
pub fn file_data(fs: &Fs, ino: u64) -> FileData {
    let a = fs.getattr(ino).expect("getattr of a file");
    let mut bytes = vec![0u8; a.size as usize];
    let n = fs.read(ino, 0, &mut bytes).expect("read of a file");
    assert_eq!(
        n as u64, a.size,
        "a read of the whole file returns its size"
    );
    FileData {
        size: a.size,
        mtime_ns: a.mtime_ns,
        content: crc32c::crc32c(&bytes),
    }
}

/// CRC-32C of an inode's extended attributes, names and values in name order; 0 when it has
/// none.
pub fn xattrs_digest(fs: &Fs, ino: u64) -> u32 {
    let list = fs.listxattr(ino).expect("listxattr of a listed name");
    let mut names: Vec<&[u8]> = list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    if names.is_empty() {
        return 0;
    }
    names.sort_unstable();
    let mut crc = 0;
    for name in names {
        let value = fs.getxattr(ino, name).expect("getxattr of a listed name");
        crc = crc32c::crc32c_append(crc, name);
        crc = crc32c::crc32c_append(crc, &(value.len() as u64).to_le_bytes());
        crc = crc32c::crc32c_append(crc, &value);
    }
    crc
}

/// Path → node, for the whole tree.
pub type Tree = BTreeMap<String, Node>;

/// Reads the whole tree through the public API. Directory times are left out: they are derived
/// state that a crash may leave one operation behind.
pub fn tree_of(fs: &Fs) -> Tree {
    durable_tree_of(fs, &HashMap::new())
}

/// The tree as a crash would leave it: files in `pending` (by inode number) show their recorded
/// durable state instead of their live one.
pub fn durable_tree_of(fs: &Fs, pending: &HashMap<u64, FileData>) -> Tree {
    let mut out = Tree::new();
    let mut inos: BTreeMap<u64, String> = BTreeMap::new();
    walk(fs, ROOT_INO, "", &mut out, &mut inos, pending);
    out
}

fn walk(
    fs: &Fs,
    dir: u64,
    prefix: &str,
    out: &mut Tree,
    inos: &mut BTreeMap<u64, String>,
    pending: &HashMap<u64, FileData>,
) {
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
        let is_file = a.mode & 0o170000 == 0o100000;
        let data = is_file.then(|| {
            pending
                .get(&e.ino)
                .copied()
                .unwrap_or_else(|| file_data(fs, e.ino))
        });
        let node = Node {
            mode: a.mode,
            nlink: a.nlink,
            size: data.map_or(a.size, |d| d.size),
            mtime_ns: if is_dir {
                0
            } else {
                data.map_or(a.mtime_ns, |d| d.mtime_ns)
            },
            target: is_link.then(|| fs.readlink(e.ino).expect("readlink of a symlink")),
            same_as,
            content: data.map_or(0, |d| d.content),
            xattrs: xattrs_digest(fs, e.ino),
            reserved: if is_file {
                fs.reserved_ranges(e.ino).expect("ranges of a file")
            } else {
                Vec::new()
            },
        };
        out.insert(path.clone(), node);
        if is_dir {
            walk(fs, e.ino, &path, out, inos, pending);
        }
    }
}
