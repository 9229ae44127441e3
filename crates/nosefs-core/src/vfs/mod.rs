//! The kernel's VFS rules for the frontends the kernel does not stand in front of: the
//! LD_PRELOAD shim serving a program in its own process, and the `nosefs mount` daemon serving
//! shim clients over shared memory. The FUSE mount leaves all of this to the kernel.
//!
//! Both frontends resolve paths and check permissions here, once, with the same code: path
//! resolution component by component with search permission on every directory and symbolic
//! links followed ([`walk`]), and each path operation with the checks the kernel makes before
//! it calls a file system (open's flags, creation, removal, rename, link, setattr, access;
//! [`ops`]). The daemon runs them with the credentials the client's socket reported, so a client
//! cannot skip a check by leaving it out of its own process.
//!
//! Paths are *logical*: absolute, starting with the prefix under which the caller sees noseFS
//! (its mount point). Resolution that leaves the prefix (`..` at the noseFS root, a symbolic
//! link to an absolute path elsewhere) ends with [`Walked::Outside`] and the path the kernel
//! should be given instead.

pub mod ops;
pub mod walk;
pub mod xattr;

use crate::namespace::perm::Cred;
use crate::namespace::Attr;
use crate::Errno;

pub use ops::*;
pub use walk::{walk, walk_in, Walked};
pub use xattr::{xattr, XattrCall};

/// Who is calling: the credentials permissions are checked against, and the umask new inodes
/// are created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Effective user, group and supplementary groups.
    pub cred: Cred,
    /// The process's umask (only its permission bits are used).
    pub umask: u32,
}

/// A path resolved inside noseFS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The directory holding the last component.
    pub parent: u64,
    /// Its attributes.
    pub parent_attr: Attr,
    /// The last component (`.` when the path names a directory itself: the noseFS root, or one
    /// reached by `.` or `..`).
    pub name: Vec<u8>,
    /// The object, if it exists (after the last symlink, when following).
    pub attr: Option<Attr>,
    /// The absolute logical path (the prefix, then the components inside), with every symbolic
    /// link resolved: walking it again without following the last component finds the same
    /// name.
    pub path: Vec<u8>,
    /// The path ended with a slash (the object must be a directory).
    pub trailing_slash: bool,
}

impl Found {
    /// The object, or ENOENT.
    pub fn existing(&self) -> Result<Attr, Errno> {
        self.attr.ok_or(Errno::ENOENT)
    }

    /// Whether the path names the noseFS root itself.
    pub fn is_root(&self) -> bool {
        self.name == b"." && self.parent == crate::namespace::ROOT_INO
    }
}

fn core<T>(r: crate::Result<T>) -> Result<T, Errno> {
    r.map_err(|e| e.errno())
}
