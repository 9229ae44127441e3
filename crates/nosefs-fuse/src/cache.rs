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
/// Both sets are filled *before* what they cover is served: a directory before a name in it is
/// looked up (so a change racing the lookup is invalidated), an inode before the attributes the
/// kernel will cache are read (so a change racing them either comes after the read or is
/// invalidated). They shrink at `forget`, when the kernel lets an inode go.
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
}

impl KernelView {
    pub(crate) fn note_dir(&self, dir: u64) {
        self.dirs.lock().insert(dir);
    }

    pub(crate) fn note_inode(&self, ino: u64) {
        *self.inodes.lock().entry(ino).or_insert(0) += 1;
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

    fn inode(&self, ino: u64) {
        if self.view.may_hold_inode(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
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
        // Attributes only (offset -1 leaves the pages).
        let _ = self.notifier.inval_inode(INodeNo(ino), -1, 0);
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

    fn resized(&self, ino: u64, size: u64) {
        if self.view.may_hold_inode(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
            // An empty store at `size` raises the kernel's size to it (never lowers it; a
            // shrink is learnt at the next getattr, which the invalidation forces).
            let _ = self.notifier.store(INodeNo(ino), size, &[]);
        }
    }
}
