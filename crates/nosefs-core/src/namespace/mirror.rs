//! The DRAM mirror of the NVM hash table: what every lookup searches.
//!
//! One [`MirrorBucket`] per NVM bucket, each with its own lock, so lookups in different buckets
//! never contend and no lookup takes a global lock. Each bucket also carries a sequence counter
//! (the seqlock of the paper's rename): writers make it odd while they change the bucket and even
//! again after, so a path walk that crossed several buckets can tell that one of them changed under
//! it and walk again.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockWriteGuard};
use smallvec::SmallVec;

/// Entries kept inline in a bucket before it spills to the heap.
type Entries = SmallVec<[MirrorEntry; 2]>;

/// One name in the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorEntry {
    /// Full 64-bit name hash, compared before the name itself.
    pub hash: u64,
    /// The pinode slot.
    pub slot: u32,
    /// The entry's position in its directory's listing (readdir cookie).
    pub seq: u64,
}

/// One bucket of the mirror.
#[derive(Debug, Default)]
pub struct MirrorBucket {
    seq: AtomicU64,
    entries: RwLock<Entries>,
}

impl MirrorBucket {
    /// Entries whose hash equals `hash`, read under the bucket's shared lock.
    pub fn candidates(
        &self,
        hash: u64,
        mut found: impl FnMut(&MirrorEntry) -> bool,
    ) -> Option<MirrorEntry> {
        let entries = self.entries.read();
        entries.iter().find(|e| e.hash == hash && found(e)).copied()
    }

    /// The bucket's sequence number (odd while a writer is changing it).
    pub fn sequence(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Locks the bucket for writing; the sequence stays odd until the guard drops.
    pub fn lock(&self) -> BucketGuard<'_> {
        let entries = self.entries.write();
        self.seq.fetch_add(1, Ordering::AcqRel);
        BucketGuard {
            bucket: self,
            entries,
        }
    }

    /// Adds an entry at mount, without the sequence dance.
    pub fn push_unlocked(&self, entry: MirrorEntry) {
        self.entries.write().push(entry);
    }
}

/// A write lock on one mirror bucket.
#[derive(Debug)]
pub struct BucketGuard<'a> {
    bucket: &'a MirrorBucket,
    entries: RwLockWriteGuard<'a, Entries>,
}

impl BucketGuard<'_> {
    /// The entry matching `hash` for which `matches` is true.
    pub fn find(
        &self,
        hash: u64,
        mut matches: impl FnMut(&MirrorEntry) -> bool,
    ) -> Option<MirrorEntry> {
        self.entries
            .iter()
            .find(|e| e.hash == hash && matches(e))
            .copied()
    }

    /// Adds an entry.
    pub fn insert(&mut self, entry: MirrorEntry) {
        self.entries.push(entry);
    }

    /// Removes the entry for `slot`; it must be present.
    pub fn remove(&mut self, slot: u32) -> MirrorEntry {
        let at = self
            .entries
            .iter()
            .position(|e| e.slot == slot)
            .expect("removing a slot the mirror does not hold");
        self.entries.swap_remove(at)
    }
}

impl Drop for BucketGuard<'_> {
    fn drop(&mut self) {
        self.bucket.seq.fetch_add(1, Ordering::AcqRel);
    }
}
