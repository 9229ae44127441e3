//! The DRAM mirror of the NVM hash table: what every lookup searches.
//!
//! One [`MirrorBucket`] per NVM bucket, each with its own lock, so lookups in different buckets
//! never contend and no lookup takes a global lock. Each bucket also carries a sequence counter
//! (the seqlock of the paper's rename): writers make it odd while they change the bucket and even
//! again after, so a path walk that crossed several buckets can tell that one of them changed under
//! it and walk again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::{RwLock, RwLockWriteGuard};
use smallvec::SmallVec;

/// Entries kept inline in a bucket before it spills to the heap: two, so the whole bucket is
/// one cache line (asserted below) and a lookup in a bucket of up to two names touches one line.
type Entries = SmallVec<[Stored; 2]>;

/// One name as a bucket stores it: 16 bytes. The tag is the hash's high half; its low bits chose
/// the bucket, so they say nothing within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stored {
    tag: u32,
    slot: u32,
    seq: u64,
}

fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

impl Stored {
    fn new(entry: MirrorEntry) -> Stored {
        Stored {
            tag: tag_of(entry.hash),
            slot: entry.slot,
            seq: entry.seq,
        }
    }

    /// The entry, given the full hash of the name that matched it.
    fn with_hash(self, hash: u64) -> MirrorEntry {
        MirrorEntry {
            hash,
            slot: self.slot,
            seq: self.seq,
        }
    }
}

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

/// Buckets per lazily allocated chunk of [`Buckets`] (64 KiB of buckets).
const CHUNK_BUCKETS: usize = 1024;

/// NVM buckets per mirror bucket. An NVM bucket costs 8 bytes, a mirror bucket 64 (a cache
/// line), and mkfs makes at least one NVM bucket per pinode: one mirror bucket per NVM bucket would
/// hold 64-128 bytes of DRAM per name of a full image. Two per mirror bucket hold 32-64, and
/// a full image still averages at most two names per mirror bucket, which its inline entries hold.
pub const NVM_BUCKETS_PER_MIRROR_BUCKET: usize = 2;

/// The mirror's buckets, allocated a chunk at a time on first use: an image with millions of
/// buckets and few names mounts without writing (or the kernel zeroing) hundreds of megabytes of
/// empty buckets. Reaching a bucket costs one acquire load more than a plain array.
///
/// Callers name buckets by their NVM bucket index (`hash & (NVM buckets - 1)`); NVM bucket `b`
/// lives in mirror bucket `b & (count - 1)` ([`Buckets::key`]). Both counts are powers of two,
/// so names that share an NVM bucket share a mirror bucket, whose lock therefore covers their
/// NVM chain, and whose sequence and last-commit mark cover every NVM bucket it holds (a mark
/// shared by two NVM buckets only settles a log a little sooner than needed).
#[derive(Debug)]
pub struct Buckets {
    chunks: Box<[OnceLock<Box<[MirrorBucket]>>]>,
    /// Mirror buckets.
    count: usize,
    /// NVM buckets, the range of the indexes callers pass.
    nvm_count: usize,
}

impl Buckets {
    /// The empty mirror of an NVM table of `nvm_count` buckets (a power of two), none allocated
    /// yet.
    pub fn new(nvm_count: usize) -> Buckets {
        assert!(nvm_count.is_power_of_two(), "{nvm_count} NVM buckets");
        let count = (nvm_count / NVM_BUCKETS_PER_MIRROR_BUCKET).max(1);
        Buckets {
            chunks: (0..count.div_ceil(CHUNK_BUCKETS))
                .map(|_| OnceLock::new())
                .collect(),
            count,
            nvm_count,
        }
    }

    /// The mirror bucket that holds NVM bucket `nvm`: what a set of locks is deduplicated by.
    pub fn key(&self, nvm: u64) -> u64 {
        nvm & (self.count as u64 - 1)
    }
}

impl std::ops::Index<usize> for Buckets {
    type Output = MirrorBucket;

    /// The mirror bucket of NVM bucket `nvm`.
    fn index(&self, nvm: usize) -> &MirrorBucket {
        assert!(nvm < self.nvm_count, "bucket {nvm} of {}", self.nvm_count);
        let bucket = nvm & (self.count - 1);
        let chunk = self.chunks[bucket / CHUNK_BUCKETS].get_or_init(|| {
            (0..CHUNK_BUCKETS.min(self.count))
                .map(|_| MirrorBucket::default())
                .collect()
        });
        &chunk[bucket % CHUNK_BUCKETS]
    }
}

/// One bucket of the mirror, aligned to a cache line: buckets are reached at random, so each
/// lookup costs one miss, not two.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct MirrorBucket {
    seq: AtomicU64,
    entries: RwLock<Entries>,
    /// The last commit that touched this bucket, as [`crate::settle::Settler::cleared_lazily`]
    /// named it (0: none since mount). Read and written only under the bucket's write lock;
    /// atomic only to keep the type `Sync`.
    last_commit: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<MirrorBucket>() == 64);

impl MirrorBucket {
    /// Entries whose hash equals `hash`, read under the bucket's shared lock.
    pub fn candidates(
        &self,
        hash: u64,
        mut found: impl FnMut(&MirrorEntry) -> bool,
    ) -> Option<MirrorEntry> {
        let tag = tag_of(hash);
        let entries = self.entries.read();
        entries
            .iter()
            .filter(|stored| stored.tag == tag)
            .map(|stored| stored.with_hash(hash))
            .find(|e| found(e))
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

    /// The last commit that touched this bucket (0: none since mount). The caller holds the
    /// bucket's write lock.
    pub fn last_commit(&self) -> u64 {
        self.last_commit.load(Ordering::Relaxed)
    }

    /// Records the commit that touched this bucket last. The caller holds the bucket's write
    /// lock.
    pub fn set_last_commit(&self, commit: u64) {
        self.last_commit.store(commit, Ordering::Relaxed);
    }

    /// Adds an entry at mount, without the sequence dance.
    pub fn push_unlocked(&self, entry: MirrorEntry) {
        self.entries.write().push(Stored::new(entry));
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
        let tag = tag_of(hash);
        self.entries
            .iter()
            .filter(|stored| stored.tag == tag)
            .map(|stored| stored.with_hash(hash))
            .find(|e| matches(e))
    }

    /// Adds an entry.
    pub fn insert(&mut self, entry: MirrorEntry) {
        self.entries.push(Stored::new(entry));
    }

    fn position(&self, slot: u32) -> usize {
        self.entries
            .iter()
            .position(|e| e.slot == slot)
            .expect("the mirror holds the slot")
    }

    /// Removes the entry for `slot`; it must be present.
    pub fn remove(&mut self, slot: u32) {
        let at = self.position(slot);
        self.entries.swap_remove(at);
    }

    /// Points the entry for `slot` (which must be present) at `new_slot`, a new version of the
    /// same name, and returns its listing cookie.
    pub fn repoint(&mut self, slot: u32, new_slot: u32) -> u64 {
        let at = self.position(slot);
        self.entries[at].slot = new_slot;
        self.entries[at].seq
    }
}

impl Drop for BucketGuard<'_> {
    fn drop(&mut self) {
        self.bucket.seq.fetch_add(1, Ordering::AcqRel);
    }
}
