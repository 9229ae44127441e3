//! DRAM state per inode: where its pinodes are, its names, and for a directory its listing.
//!
//! All of it is rebuilt at mount from the pinode table; NVM stays the truth for attributes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use crate::format::pinode::{S_IFDIR, S_IFREG};

/// Cookies 1 and 2 are "." and ".."; entries start after them.
pub const FIRST_ENTRY_SEQ: u64 = 3;

/// A directory's entries by cookie. Cookies only grow, so inserts land at the right edge of the
/// tree, which stays in cache. Its lock is a leaf: nothing else is locked while it is held.
#[derive(Debug, Default)]
pub struct Listing {
    entries: Mutex<BTreeMap<u64, u32>>,
}

impl Listing {
    /// Adds or repoints entry `seq`.
    pub fn insert(&self, seq: u64, slot: u32) {
        self.entries.lock().insert(seq, slot);
    }

    /// Removes entry `seq`.
    pub fn remove(&self, seq: &u64) {
        self.entries.lock().remove(seq);
    }

    /// Whether the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.lock().is_empty()
    }

    /// Up to `max` entries from cookie `start` on, copied out so no lock is held by the caller.
    pub fn batch_from(&self, start: u64, max: usize) -> Vec<(u64, u32)> {
        let entries = self.entries.lock();
        entries
            .range(start..)
            .take(max)
            .map(|(&k, &v)| (k, v))
            .collect()
    }
}

/// One directory's listing. It changes only under the directory's inode lock, so an operation
/// holding that lock (rmdir checking emptiness) sees it stable; readdir reads it without locks.
#[derive(Debug)]
pub struct DirState {
    /// Entries by sequence number (the readdir cookie): slot of the name's pinode.
    pub children: Listing,
    next_seq: AtomicU64,
}

impl DirState {
    /// An empty listing.
    pub fn new() -> DirState {
        DirState {
            children: Listing::default(),
            next_seq: AtomicU64::new(FIRST_ENTRY_SEQ),
        }
    }

    /// A fresh cookie for a new entry. Cookies only grow, so a readdir cursor never sees a
    /// surviving entry twice nor skips one.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for DirState {
    fn default() -> Self {
        DirState::new()
    }
}

/// What changes under the inode's lock.
#[derive(Debug)]
pub struct InodeData {
    /// Slots of every name of the inode; the primary is among them.
    pub names: SmallVec<[u32; 2]>,
    /// Subdirectories (directories only), for the link count.
    pub subdirs: u32,
}

/// One inode in DRAM.
#[derive(Debug)]
pub struct Inode {
    /// The inode number.
    pub ino: u64,
    /// Slot of the primary pinode; changes when a new version is committed.
    pub primary: AtomicU32,
    /// Set once the last name is gone.
    pub removed: AtomicBool,
    /// Open file descriptions (regular files; counted by frontends through `Fs::open`).
    pub open_count: AtomicU32,
    /// The file lost its last name while open: its primary pinode is an `ORPHAN`, in no chain,
    /// freed at the last close (or at the next mount).
    pub orphaned: AtomicBool,
    /// Names and counts, changed by operations that hold it.
    pub data: Arc<Mutex<InodeData>>,
    /// The listing, for directories (boxed: most inodes are not directories).
    pub dir: Option<Box<DirState>>,
    /// Whether the inode is a regular file.
    is_file: bool,
    /// The data map of a regular file, made on first use ([`Inode::file_state`]): until then the
    /// file has no extents and nothing pending, and its primary pinode alone describes it. Most
    /// files a create makes are never written by the process that made them, and the state is the
    /// largest part of an inode, so creates do not pay for it. Locked after the inode lock when
    /// both are taken.
    file: OnceLock<Box<Mutex<crate::file::FileState>>>,
}

impl Inode {
    /// A new inode whose primary pinode is at `slot`, of type `file_type` (the `S_IFMT` bits of
    /// its mode): a directory gets an empty listing; a regular file gets `file`, its data as
    /// mount found it, or no state yet when it has no extents.
    pub fn new(ino: u64, slot: u32, file_type: u32, file: Option<crate::file::FileState>) -> Inode {
        let is_file = file_type == S_IFREG;
        assert!(
            is_file || file.is_none(),
            "only regular files have data state"
        );
        let state = OnceLock::new();
        if let Some(file) = file {
            state
                .set(Box::new(Mutex::new(file)))
                .expect("a new OnceLock is empty");
        }
        Inode {
            ino,
            primary: AtomicU32::new(slot),
            removed: AtomicBool::new(false),
            open_count: AtomicU32::new(0),
            orphaned: AtomicBool::new(false),
            data: Arc::new(Mutex::new(InodeData {
                names: smallvec::smallvec![slot],
                subdirs: 0,
            })),
            dir: (file_type == S_IFDIR).then(|| Box::new(DirState::new())),
            is_file,
            file: state,
        }
    }

    /// Whether the inode is a regular file.
    pub fn is_file(&self) -> bool {
        self.is_file
    }

    /// The regular file's data state, if a file operation has made it. `None` means no extents
    /// and nothing pending.
    pub fn file_state(&self) -> Option<&Mutex<crate::file::FileState>> {
        self.file.get().map(|state| &**state)
    }

    /// The regular file's data state, made by `make` if it does not exist yet. The caller holds
    /// the inode lock, so the pinode `make` reads cannot change under it.
    pub fn file_state_or_make(
        &self,
        make: impl FnOnce() -> crate::file::FileState,
    ) -> &Mutex<crate::file::FileState> {
        assert!(self.is_file, "only regular files have data state");
        self.file.get_or_init(|| Box::new(Mutex::new(make())))
    }

    /// Slot of the primary pinode.
    pub fn primary_slot(&self) -> u32 {
        self.primary.load(Ordering::Acquire)
    }
}

const SHARDS: usize = 64;

/// Inode numbers are dense integers handed out in order, so the hash keeps their order where
/// the table looks first: the low bits (the home bucket) are the number's position within its
/// shard, so consecutive creates fill consecutive buckets and a lookup of a recent inode finds
/// its line in cache. The top seven bits (the tag the table compares before keys) come from a
/// multiplicative mix, so tags stay spread.
#[derive(Debug, Default, Clone, Copy)]
pub struct InoHasher(u64);

/// Bits below the table's 7-bit tag.
const BELOW_TAG: u64 = (1 << 57) - 1;

impl std::hash::Hasher for InoHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        let mixed = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = ((n / SHARDS as u64) & BELOW_TAG) | (mixed & !BELOW_TAG);
    }
}

type InoMap = HashMap<u64, Arc<Inode>, std::hash::BuildHasherDefault<InoHasher>>;

/// Inodes by number, sharded so that no lookup takes a global lock.
#[derive(Debug)]
pub struct InodeTable {
    shards: Vec<RwLock<InoMap>>,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(InoMap::default()))
                .collect(),
        }
    }
}

impl InodeTable {
    fn shard(&self, ino: u64) -> &RwLock<InoMap> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The inode numbered `ino`, if it exists.
    pub fn get(&self, ino: u64) -> Option<Arc<Inode>> {
        self.shard(ino).read().get(&ino).cloned()
    }

    /// Adds an inode.
    pub fn insert(&self, inode: Arc<Inode>) {
        self.shard(inode.ino).write().insert(inode.ino, inode);
    }

    /// Makes room for `more` inodes spread over the shards, so that mount's inserts never rehash.
    pub fn reserve(&self, more: usize) {
        for shard in &self.shards {
            shard.write().reserve(more.div_ceil(SHARDS));
        }
    }

    /// Removes an inode.
    pub fn remove(&self, ino: u64) {
        self.shard(ino).write().remove(&ino);
    }

    /// Every inode (for mount-time fix-ups and tests).
    pub fn all(&self) -> Vec<Arc<Inode>> {
        self.shards
            .iter()
            .flat_map(|s| s.read().values().cloned().collect::<Vec<_>>())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inode_without_data_state_stays_small() {
        // Every name created costs one of these (plus the Arc's two counters); a create's time
        // is largely the memory it touches, so growth here should be a decision, not an accident.
        assert!(
            std::mem::size_of::<Inode>() <= 64,
            "Inode is {} bytes",
            std::mem::size_of::<Inode>()
        );
    }

    #[test]
    fn only_regular_files_get_data_state() {
        let file = Inode::new(5, 9, S_IFREG, None);
        assert!(file.is_file() && file.file_state().is_none() && file.dir.is_none());
        let state = file.file_state_or_make(|| crate::file::FileState::new(0));
        assert!(std::ptr::eq(state, file.file_state().unwrap()), "made once");
        let dir = Inode::new(6, 10, S_IFDIR, None);
        assert!(!dir.is_file() && dir.file_state().is_none() && dir.dir.is_some());
    }
}
