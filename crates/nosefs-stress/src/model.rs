//! What a worker's directory must hold: its names, and for each the node it names (a file's
//! bytes, a directory, a symlink), kept exactly as the kernel's file systems keep them, with
//! the errno each call must give when it fails.
//!
//! Paths are relative to the worker's directory ("f0", "d0/f1"). A symlink always points at
//! `no/such`, which never exists: following one fails with ENOENT, and `O_NOFOLLOW` gives ELOOP.

use std::collections::{BTreeMap, HashMap};

/// Where every symlink points: a name no operation makes.
pub const SYMLINK_TARGET: &str = "no/such";

/// The extended attributes the stress sets (the only ones a description reads back).
pub const XATTR_NAMES: [&str; 2] = ["user.a", "user.b"];

/// What a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink (to [`SYMLINK_TARGET`]).
    Symlink,
}

/// One file, directory or symlink.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its type.
    pub kind: Kind,
    /// A file's bytes.
    pub data: Vec<u8>,
    /// Permission bits.
    pub perm: u32,
    /// Extended attributes by name.
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

impl Node {
    fn new(kind: Kind, perm: u32) -> Node {
        Node {
            kind,
            data: Vec::new(),
            perm,
            xattrs: BTreeMap::new(),
        }
    }
}

/// A worker's directory: names (full relative paths) to node ids, and the nodes.
#[derive(Debug, Default, Clone)]
pub struct Model {
    names: BTreeMap<String, u64>,
    nodes: HashMap<u64, Node>,
    next_id: u64,
}

/// The parent directory of `path`, `None` at the top.
pub fn parent(path: &str) -> Option<&str> {
    path.rfind('/').map(|at| &path[..at])
}

/// Whether `path` lies strictly inside directory path `dir`.
pub fn inside(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

impl Model {
    /// The errno resolving the directories above `path` gives, if any.
    pub fn check_parent(&self, path: &str) -> Result<(), i32> {
        let mut at = 0;
        while let Some(slash) = path[at..].find('/') {
            let dir = &path[..at + slash];
            match self.kind_of(dir) {
                None | Some(Kind::Symlink) => return Err(libc::ENOENT),
                Some(Kind::File) => return Err(libc::ENOTDIR),
                Some(Kind::Dir) => {}
            }
            at += slash + 1;
        }
        Ok(())
    }

    /// The node `path` names, after its directories resolve.
    pub fn lookup(&self, path: &str) -> Result<Option<u64>, i32> {
        self.check_parent(path)?;
        Ok(self.names.get(path).copied())
    }

    /// The node `path` names, or ENOENT (or the directories' errno).
    pub fn existing(&self, path: &str) -> Result<u64, i32> {
        self.lookup(path)?.ok_or(libc::ENOENT)
    }

    /// The type of what `path` names, if anything (no checks above it).
    pub fn kind_of(&self, path: &str) -> Option<Kind> {
        self.names.get(path).map(|id| self.nodes[id].kind)
    }

    /// The node `id`.
    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[&id]
    }

    /// The node `id`, to change.
    pub fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes.get_mut(&id).expect("a live node")
    }

    /// Makes a new node named `path` (whose name is free and whose parent is a directory).
    pub fn create(&mut self, path: &str, kind: Kind, perm: u32) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.nodes.insert(id, Node::new(kind, perm));
        let old = self.names.insert(path.to_string(), id);
        assert!(old.is_none(), "{path} was taken");
        id
    }

    /// Adds name `path` for node `id` (a hard link).
    pub fn link(&mut self, id: u64, path: &str) {
        let old = self.names.insert(path.to_string(), id);
        assert!(old.is_none(), "{path} was taken");
    }

    /// Removes name `path` (and the node with its last name; a directory must be empty).
    pub fn remove(&mut self, path: &str) {
        let id = self.names.remove(path).expect("a name to remove");
        if !self.names.values().any(|&other| other == id) {
            self.nodes.remove(&id);
        }
    }

    /// Whether directory `path` has no entries.
    pub fn is_empty_dir(&self, path: &str) -> bool {
        !self.names.keys().any(|name| inside(name, path))
    }

    /// Moves name `from` (with everything under it) to `to`, which is free.
    pub fn rename(&mut self, from: &str, to: &str) {
        let moved: Vec<(String, u64)> = self
            .names
            .iter()
            .filter(|(name, _)| *name == from || inside(name, from))
            .map(|(name, &id)| (name.clone(), id))
            .collect();
        for (name, _) in &moved {
            self.names.remove(name);
        }
        for (name, id) in moved {
            let renamed = format!("{to}{}", &name[from.len()..]);
            let old = self.names.insert(renamed, id);
            assert!(old.is_none(), "rename onto a taken name");
        }
    }

    /// RENAME_EXCHANGE of two existing names.
    pub fn exchange(&mut self, a: &str, b: &str) {
        const SWAP: &str = "\u{0}swap";
        self.rename(a, SWAP);
        self.rename(b, a);
        self.rename(SWAP, b);
    }

    /// `st_nlink` of node `id`: its names, or for a directory 2 plus its subdirectories.
    pub fn nlink(&self, id: u64, path: &str) -> u64 {
        match self.nodes[&id].kind {
            Kind::Dir => {
                let subdirs = self
                    .names
                    .iter()
                    .filter(|(name, sub)| {
                        parent(name) == Some(path) && self.nodes[*sub].kind == Kind::Dir
                    })
                    .count();
                2 + subdirs as u64
            }
            _ => self.names.values().filter(|&&other| other == id).count() as u64,
        }
    }

    /// Every name, in order.
    pub fn names(&self) -> impl Iterator<Item = (&str, u64)> {
        self.names.iter().map(|(name, &id)| (name.as_str(), id))
    }
}
