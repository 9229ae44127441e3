//! What the kernel may cache through the mount ([`KernelView`]), and telling it what the
//! daemon's shim clients changed ([`Invalidator`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::INodeNo;

/// What the kernel may have cached through this mount, so that the daemon invalidates only
/// that (each invalidation is a write to /dev/fuse, about a microsecond, and a name a shim
/// client creates in a directory the kernel never looked into needs none).
///
/// The sets are filled *before* what they cover is served: a directory before a name in it is
/// looked up (so a change racing the lookup is invalidated), an inode before the attributes the
/// kernel will cache are read (so a change racing them either comes after the read or is
/// invalidated). They shrink at `forget`, when the kernel lets an inode go.
///
/// Attributes are invalidated only while the kernel may hold them valid: from a reply that
/// gave them (lookup, getattr, setattr, create, readdirplus) to the next invalidation, after
/// which the kernel asks again before it uses them. A directory in which a shim client creates
/// a thousand files is invalidated once, not a thousand times, unless the kernel looks at it
/// in between. (An invalidation racing a reply is safe either way: the flag is set before the
/// reply's attributes are read, so the invalidation either finds it set or comes before that
/// read, which then sees the change; and the kernel drops a reply's attributes if an
/// invalidation of the inode came after the request was sent.)
#[derive(Debug, Default)]
pub struct KernelView {
    /// Directories the kernel may hold entries (or negative entries) of.
    dirs: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Inodes the kernel holds, with their lookup counts (FUSE's nlookup).
    inodes: parking_lot::Mutex<std::collections::HashMap<u64, u64>>,
    /// Held inodes whose data the kernel may have cached pages of: it read or wrote through the
    /// mount (a READ or WRITE served, a mapping's faults and write-back among them). A file the
    /// kernel holds only for its record locks (SQLite's, PostgreSQL's) has none, and a write
    /// by a shim client then invalidates its attributes alone instead of storing its bytes
    /// into pages of the kernel's cache no one reads (a copy of the data, memory included).
    paged: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Inodes whose attributes the kernel may hold as valid: given in a reply since their last
    /// invalidation.
    attrs: parking_lot::Mutex<std::collections::HashSet<u64>>,
}

impl KernelView {
    pub(crate) fn note_dir(&self, dir: u64) {
        self.dirs.lock().insert(dir);
    }

    /// The kernel takes a lookup reference on `ino`, with its attributes (read after this).
    pub(crate) fn note_inode(&self, ino: u64) {
        *self.inodes.lock().entry(ino).or_insert(0) += 1;
        self.note_attrs(ino);
    }

    /// The kernel is about to be given the attributes of `ino` (read after this).
    pub(crate) fn note_attrs(&self, ino: u64) {
        self.attrs.lock().insert(ino);
    }

    /// Whether the kernel may hold valid attributes of `ino`; they count as invalidated from
    /// now on (the caller invalidates them when this says so).
    fn take_attrs(&self, ino: u64) -> bool {
        self.attrs.lock().remove(&ino)
    }

    pub(crate) fn forget(&self, ino: u64, nlookup: u64) {
        let mut inodes = self.inodes.lock();
        let gone = match inodes.get_mut(&ino) {
            Some(count) => {
                *count = count.saturating_sub(nlookup);
                *count == 0
            }
            None => false,
        };
        if gone {
            inodes.remove(&ino);
            drop(inodes);
            self.dirs.lock().remove(&ino);
            self.paged.lock().remove(&ino);
            self.attrs.lock().remove(&ino);
        }
    }

    pub(crate) fn note_paged(&self, ino: u64) {
        self.paged.lock().insert(ino);
    }

    pub(crate) fn may_cache_pages_of(&self, ino: u64) -> bool {
        self.paged.lock().contains(&ino)
    }

    pub(crate) fn may_hold_entries_of(&self, dir: u64) -> bool {
        self.dirs.lock().contains(&dir)
    }

    pub(crate) fn may_hold_inode(&self, ino: u64) -> bool {
        ino == nosefs_core::namespace::ROOT_INO || self.inodes.lock().contains_key(&ino)
    }
}

/// The largest write whose bytes are stored into the kernel's cached pages; above it, the range
/// is dropped from the cache instead (a store copies the data once more).
const STORE_MAX_BYTES: usize = 64 << 10;

/// The kernel's caches, told what the daemon's shim clients changed
/// ([`nosefs_daemon::server::Invalidate`] through fuser's notifier). Errors mean the kernel had
/// nothing cached, or the mount is going away: nothing to do either way.
#[derive(Debug)]
pub struct Invalidator {
    notifier: fuser::Notifier,
    view: Arc<KernelView>,
}

impl Invalidator {
    /// Tells the kernel through `notifier` what it may have cached, as `view` says.
    pub fn new(notifier: fuser::Notifier, view: Arc<KernelView>) -> Invalidator {
        Invalidator { notifier, view }
    }
}

impl nosefs_daemon::server::Invalidate for Invalidator {
    fn entry(&self, parent: u64, name: &[u8]) {
        if self.view.may_hold_entries_of(parent) {
            let _ = self
                .notifier
                .inval_entry(INodeNo(parent), OsStr::from_bytes(name));
        }
    }

    /// Attributes and cached pages; for an inode the kernel caches no pages of (a directory,
    /// a file held only for its locks), the attributes alone, and only while the kernel may
    /// hold them valid.
    fn inode(&self, ino: u64) {
        if !self.view.may_hold_inode(ino) {
            return;
        }
        if self.view.may_cache_pages_of(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
        } else if self.view.take_attrs(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), -1, 0);
        }
    }

    /// The written bytes go into the kernel's cached pages of the range (FUSE's notify store),
    /// so a process mapping the file through the mount keeps its other pages and sees these
    /// without faulting them in again; a store also raises the kernel's size. Larger writes
    /// drop the range instead. Before, every write dropped the whole file's pages: LMDB, which
    /// maps its file read-only and writes with pwrite, refaulted its map after each update.
    fn written(&self, ino: u64, offset: u64, data: &[u8]) {
        if !self.view.may_hold_inode(ino) {
            return;
        }
        // Attributes only (offset -1 leaves the pages), if the kernel may hold them valid.
        if self.view.take_attrs(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), -1, 0);
        }
        if !self.view.may_cache_pages_of(ino) {
            return;
        }
        let stored = data.len() <= STORE_MAX_BYTES
            && self.notifier.store(INodeNo(ino), offset, data).is_ok();
        if !stored {
            let _ =
                self.notifier
                    .inval_inode(INodeNo(ino), offset as i64, data.len().max(1) as i64);
        }
    }

    fn attributes(&self, ino: u64) {
        if self.view.may_hold_inode(ino) && self.view.take_attrs(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), -1, 0);
        }
    }

    fn may_be_mounted_on(&self, ino: u64) -> bool {
        self.view.may_hold_inode(ino)
    }

    fn resized(&self, ino: u64, size: u64) {
        if self.view.may_hold_inode(ino) {
            self.view.take_attrs(ino);
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
            // An empty store at `size` raises the kernel's size to it (never lowers it; a
            // shrink is learnt at the next getattr, which the invalidation forces).
            let _ = self.notifier.store(INodeNo(ino), size, &[]);
        }
    }
}
