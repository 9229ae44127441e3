//! DRAM state per inode: where its pinodes are, its names, and for a directory its listing.
//!
//! All of it is rebuilt at mount from the pinode table; NVM stays the truth for attributes.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::format::pinode::{S_IFDIR, S_IFMT, S_IFREG, S_ISGID, S_ISUID};
use crate::padded::CachePadded;

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

    /// The cookie the next new entry will get: every entry listed now has a smaller one.
    pub fn listing_end(&self) -> u64 {
        self.next_seq.load(Ordering::Relaxed)
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

/// No name: the inode lost its last one.
const NO_NAME: u32 = u32::MAX;

/// What changes under the inode's lock. Kept to 16 bytes: one lives in every inode, and nearly
/// every inode has a single name, which needs no allocation.
#[derive(Debug)]
pub struct InodeData {
    /// Slot of one name ([`NO_NAME`] once the last is gone).
    first_name: u32,
    /// Subdirectories (directories only), for the link count. A regular file keeps here what
    /// [`InodeData::counted_blocks`] says instead.
    pub subdirs: u32,
    /// Slots of the other names (hard links), if there are any. Boxed: 8 bytes in every inode
    /// instead of a `Vec`'s 24, for what few inodes need.
    #[allow(clippy::box_collection)]
    more_names: Option<Box<Vec<u32>>>,
}

impl InodeData {
    fn new(slot: u32) -> InodeData {
        InodeData {
            first_name: slot,
            subdirs: 0,
            more_names: None,
        }
    }

    /// Slots of every name of the inode; the primary is among them.
    pub fn names(&self) -> impl Iterator<Item = u32> + '_ {
        let first = (self.first_name != NO_NAME).then_some(self.first_name);
        first
            .into_iter()
            .chain(self.more_names.iter().flat_map(|more| more.iter().copied()))
    }

    /// How many names the inode has.
    pub fn name_count(&self) -> usize {
        usize::from(self.first_name != NO_NAME) + self.more_names.as_ref().map_or(0, |m| m.len())
    }

    /// A regular file with no data state: its `st_blocks` (in 4 KiB units) as last counted
    /// from its extent list, if counted. While a file has no state nothing changes its extents
    /// (every change makes the state first, and the state is never dropped), so the count
    /// stays true; once the state exists it counts instead. Kept in `subdirs` (plus one; 0:
    /// not counted), which a regular file does not use, so that an inode stays in one line.
    pub fn counted_blocks(&self) -> Option<u64> {
        self.subdirs.checked_sub(1).map(u64::from)
    }

    /// Records [`InodeData::counted_blocks`] (a count past `u32` is not kept).
    pub fn set_counted_blocks(&mut self, blocks: u64) {
        if let Ok(plus_one) = u32::try_from(blocks + 1) {
            self.subdirs = plus_one;
        }
    }

    /// Whether `slot` is one of the inode's names.
    pub fn has_name(&self, slot: u32) -> bool {
        self.names().any(|s| s == slot)
    }

    /// Adds a name.
    pub fn add_name(&mut self, slot: u32) {
        assert_ne!(slot, NO_NAME, "slot numbers stay below u32::MAX");
        if self.first_name == NO_NAME {
            self.first_name = slot;
        } else {
            self.more_names
                .get_or_insert_with(Default::default)
                .push(slot);
        }
    }

    /// Removes the name at `slot`, if it is one.
    pub fn remove_name(&mut self, slot: u32) {
        if let Some(more) = &mut self.more_names {
            more.retain(|&s| s != slot);
        }
        if self.first_name == slot {
            self.first_name = self
                .more_names
                .as_mut()
                .and_then(|more| more.pop())
                .unwrap_or(NO_NAME);
        }
        if self.more_names.as_ref().is_some_and(|m| m.is_empty()) {
            self.more_names = None;
        }
    }

    /// The name at `old` moved to `new`.
    pub fn repoint_name(&mut self, old: u32, new: u32) {
        if self.first_name == old {
            self.first_name = new;
        }
        for s in self.more_names.iter_mut().flat_map(|m| m.iter_mut()) {
            if *s == old {
                *s = new;
            }
        }
    }

    /// Forgets every name.
    pub fn clear_names(&mut self) {
        self.first_name = NO_NAME;
        self.more_names = None;
    }

    /// Replaces the names with `slots`.
    pub fn set_names(&mut self, slots: impl IntoIterator<Item = u32>) {
        self.clear_names();
        slots.into_iter().for_each(|s| self.add_name(s));
    }
}

/// What an inode holds besides its attributes, by type.
#[derive(Debug)]
enum Contents {
    /// A directory's listing, made with the inode.
    Dir(DirState),
    /// A regular file's data map, made on first use ([`Inode::file_state`]). Boxed again so
    /// that a directory's contents are not the size of a file's (40 bytes, not 300).
    File(Box<Mutex<crate::file::FileState>>),
}

/// [`Inode::has_acl`].
const ACCESS_ACL: u8 = 1;
/// [`Inode::has_setid`].
const SETID: u8 = 2;

/// One inode in DRAM.
#[derive(Debug)]
pub struct Inode {
    /// The inode number.
    pub ino: u64,
    /// Slot of the primary pinode; changes when a new version is committed.
    pub primary: AtomicU32,
    /// Set once the last name is gone.
    pub removed: AtomicBool,
    /// Open file descriptions (regular files and directories; counted by frontends through
    /// `Fs::open`).
    pub open_count: AtomicU32,
    /// The file lost its last name while open: its primary pinode is an `ORPHAN`, in no chain,
    /// freed at the last close (or at the next mount).
    pub orphaned: AtomicBool,
    /// Whether the inode is a regular file.
    is_file: bool,
    /// [`ACCESS_ACL`] and [`SETID`]: what permission checks and writes ask of the inode without
    /// reading its pinode. One byte for both keeps the inode in one cache line.
    marks: AtomicU8,
    /// Slot of its attribute pinode (`FLAG_XATTR`), 0 when it has no extended attributes.
    /// Changed under the inode lock, after the commit that swapped the pinodes.
    pub xattrs: AtomicU32,
    /// Names and counts, changed by operations that hold it.
    pub data: Mutex<InodeData>,
    /// A directory's listing (set at creation), or a regular file's data map, made on first use
    /// ([`Inode::file_state`]): until then the file has no extents and nothing pending, and its
    /// primary pinode alone describes it. Most files a create makes are never written by the
    /// process that made them, and the state is the largest part of an inode, so creates do not
    /// pay for it. The file state is locked after the inode lock when both are taken. One
    /// pointer for both: every name costs an inode, and most inodes need neither.
    contents: OnceLock<Box<Contents>>,
}

impl Inode {
    /// A new inode whose primary pinode is at `slot`, with `mode` (its type bits, and its
    /// permission bits when known: the set-id ones count): a directory gets an empty listing; a
    /// regular file gets `file`, its data as mount found it, or no state yet when it has no
    /// extents.
    pub fn new(ino: u64, slot: u32, mode: u32, file: Option<crate::file::FileState>) -> Inode {
        let file_type = mode & S_IFMT;
        let is_file = file_type == S_IFREG;
        assert!(
            is_file || file.is_none(),
            "only regular files have data state"
        );
        let contents = OnceLock::new();
        let made = match (file_type == S_IFDIR, file) {
            (true, _) => Some(Contents::Dir(DirState::new())),
            (false, Some(file)) => Some(Contents::File(Box::new(Mutex::new(file)))),
            (false, None) => None,
        };
        if let Some(made) = made {
            contents
                .set(Box::new(made))
                .expect("a new OnceLock is empty");
        }
        Inode {
            ino,
            primary: AtomicU32::new(slot),
            removed: AtomicBool::new(false),
            open_count: AtomicU32::new(0),
            orphaned: AtomicBool::new(false),
            is_file,
            marks: AtomicU8::new(if mode & (S_ISUID | S_ISGID) != 0 {
                SETID
            } else {
                0
            }),
            xattrs: AtomicU32::new(0),
            data: Mutex::new(InodeData::new(slot)),
            contents,
        }
    }

    /// Records the mode of a new primary version (the set-id bits are what is kept).
    pub fn note_mode(&self, mode: u32) {
        self.set_mark(SETID, mode & (S_ISUID | S_ISGID) != 0);
    }

    /// Whether its mode has set-user-id or set-group-id, which a write by someone else clears
    /// (every mode change is a new primary version, which notes it), so a write to an ordinary
    /// file asks nothing more (`Fs::write_by`).
    pub fn has_setid(&self) -> bool {
        self.marks.load(Ordering::Acquire) & SETID != 0
    }

    /// Whether its attributes hold an access ACL (`system.posix_acl_access`), which then decides
    /// permissions instead of the mode alone. Changed with `xattrs`, under the inode lock.
    pub fn has_acl(&self) -> bool {
        self.marks.load(Ordering::Acquire) & ACCESS_ACL != 0
    }

    /// Records whether its attributes hold an access ACL.
    pub fn note_acl(&self, present: bool) {
        self.set_mark(ACCESS_ACL, present);
    }

    fn set_mark(&self, mark: u8, on: bool) {
        if on {
            self.marks.fetch_or(mark, Ordering::AcqRel);
        } else {
            self.marks.fetch_and(!mark, Ordering::AcqRel);
        }
    }

    /// Whether the inode is a regular file.
    pub fn is_file(&self) -> bool {
        self.is_file
    }

    /// The listing, for directories.
    pub fn dir(&self) -> Option<&DirState> {
        match self.contents.get().map(|c| &**c) {
            Some(Contents::Dir(dir)) => Some(dir),
            _ => None,
        }
    }

    /// The regular file's data state, if a file operation has made it. `None` means no extents
    /// and nothing pending.
    pub fn file_state(&self) -> Option<&Mutex<crate::file::FileState>> {
        match self.contents.get().map(|c| &**c) {
            Some(Contents::File(file)) => Some(file),
            _ => None,
        }
    }

    /// The regular file's data state, made by `make` if it does not exist yet. The caller holds
    /// the inode lock, so the pinode `make` reads cannot change under it.
    pub fn file_state_or_make(
        &self,
        make: impl FnOnce() -> crate::file::FileState,
    ) -> &Mutex<crate::file::FileState> {
        assert!(self.is_file, "only regular files have data state");
        let contents = self
            .contents
            .get_or_init(|| Box::new(Contents::File(Box::new(Mutex::new(make())))));
        match &**contents {
            Contents::File(file) => file,
            Contents::Dir(_) => unreachable!("a regular file has no listing"),
        }
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

/// A table entry: the inode, found by its number. The number is the inode's own field, so the
/// table holds 8 bytes per inode (a map keyed by number would hold 16).
#[derive(Debug)]
struct ByIno(Arc<Inode>);

impl std::borrow::Borrow<u64> for ByIno {
    fn borrow(&self) -> &u64 {
        &self.0.ino
    }
}

impl std::hash::Hash for ByIno {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `u64` hashes, which `Borrow` requires.
        self.0.ino.hash(state);
    }
}

impl PartialEq for ByIno {
    fn eq(&self, other: &ByIno) -> bool {
        self.0.ino == other.0.ino
    }
}

impl Eq for ByIno {}

type InoMap = HashSet<ByIno, std::hash::BuildHasherDefault<InoHasher>>;

/// Inodes by number, sharded so that no lookup takes a global lock. Each shard (its lock word
/// and table header, 40 bytes) is alone on its cache lines: every lookup takes its shard's lock
/// with a locked instruction, and packed, two threads working on different shards would still
/// pass one line between them.
#[derive(Debug)]
pub struct InodeTable {
    shards: Vec<CachePadded<RwLock<InoMap>>>,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable {
            shards: (0..SHARDS)
                .map(|_| CachePadded(RwLock::new(InoMap::default())))
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
        self.shard(ino).read().get(&ino).map(|e| e.0.clone())
    }

    /// Adds an inode.
    pub fn insert(&self, inode: Arc<Inode>) {
        self.shard(inode.ino).write().replace(ByIno(inode));
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
            .flat_map(|s| s.read().iter().map(|e| e.0.clone()).collect::<Vec<_>>())
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
    fn names_survive_links_and_unlinks_in_any_order() {
        assert_eq!(
            std::mem::size_of::<InodeData>(),
            16,
            "one per inode: keep it small"
        );
        let mut data = InodeData::new(7);
        assert_eq!((data.name_count(), data.has_name(7)), (1, true));
        data.add_name(8);
        data.add_name(9);
        data.remove_name(7);
        let mut names: Vec<u32> = data.names().collect();
        names.sort_unstable();
        assert_eq!(names, [8, 9]);
        data.repoint_name(9, 10);
        assert!(data.has_name(10) && !data.has_name(9) && data.name_count() == 2);
        data.remove_name(8);
        data.remove_name(10);
        assert_eq!(data.name_count(), 0);
        assert!(
            data.more_names.is_none(),
            "the spill goes with the last extra name"
        );
        data.add_name(11);
        assert_eq!(data.names().collect::<Vec<_>>(), [11]);
        data.set_names([1, 2, 3]);
        assert_eq!(data.names().collect::<Vec<_>>(), [1, 2, 3]);
        data.clear_names();
        assert_eq!(data.names().count(), 0);
    }

    #[test]
    fn only_regular_files_get_data_state() {
        let file = Inode::new(5, 9, S_IFREG, None);
        assert!(file.is_file() && file.file_state().is_none() && file.dir().is_none());
        let state = file.file_state_or_make(|| crate::file::FileState::new(0));
        assert!(std::ptr::eq(state, file.file_state().unwrap()), "made once");
        let dir = Inode::new(6, 10, S_IFDIR, None);
        assert!(!dir.is_file() && dir.file_state().is_none() && dir.dir().is_some());
    }
}
