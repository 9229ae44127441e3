//! Namespace transactions through the directory journal (the paper's address-only redo log).
//!
//! A transaction removes some pinode slots from the namespace and inserts freshly written ones.
//! [`commit`] is the one function that makes it durable and atomic; [`apply`] is its apply step,
//! shared with recovery, and idempotent so a crash at any point (also during recovery) is repaired
//! by applying the committed log again.

use smallvec::SmallVec;
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

use crate::format::extent::FLAG_VALID as EXTENT_VALID;
use crate::format::hash_table::{bucket_of, Bucket};
use crate::format::journal::{
    DirEntry, DIR_LOG_ENTRIES, DIR_OP_INSERT, DIR_OP_INSERT_DATA, DIR_OP_ORPHAN, DIR_OP_REMOVE,
    DIR_OP_REMOVE_DATA,
};
use crate::format::long_name::{LongName, LONG_NAME_BYTES};
use crate::format::pinode::{Pinode, FLAG_VALID, PINODE_BYTES};
use crate::image::Image;
pub use crate::journal::{fault, set_bitmap_bits, TAIL_COUNT_MASK};
use crate::pmem::CACHE_LINE;

/// Offset of `flags` in a pinode.
const FLAGS_OFFSET: u64 = 16;
/// Offset of `flags` in an extent.
const EXTENT_FLAGS_OFFSET: u64 = 16;
/// Offset of `hash_next` in a pinode.
const HASH_NEXT_OFFSET: u64 = 68;

/// A derived field stored in place during the apply step: `len` (4 or 8) little-endian bytes of
/// `value` at `offset`, aligned so the store is atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InPlace {
    /// Byte offset in the image.
    pub offset: u64,
    /// The value.
    pub value: u64,
    /// 4 or 8.
    pub len: u8,
}

/// One namespace transaction. Small vectors keep the common case off the heap.
#[derive(Debug, Default)]
pub struct Txn {
    /// Slots leaving the namespace (their valid bit is cleared).
    pub removes: SmallVec<[u32; 4]>,
    /// New pinode versions to write (valid bit clear until applied) and insert.
    pub inserts: SmallVec<[(u32, Pinode); 2]>,
    /// Long-name records the inserted pinodes refer to.
    pub long_names: Vec<(u32, LongName)>,
    /// Derived fields (link counts, directory times) stored in place during the apply step, under
    /// its fence. They are not logged: mount recomputes link counts, and a time may lag by the
    /// operation a crash interrupted.
    pub in_place: SmallVec<[InPlace; 6]>,
    /// Inserted slots that bring new data (logged as INSERT_DATA).
    pub data_inserts: SmallVec<[u32; 1]>,
    /// Removed slots whose inode's data goes with them (logged as REMOVE_DATA).
    pub data_removes: SmallVec<[u32; 1]>,
    /// Inserted slots that are orphans, in no bucket (logged as ORPHAN).
    pub orphan_inserts: SmallVec<[u32; 1]>,
}

/// The NVM bucket of each insert of a transaction, in `inserts` order (`None` for an orphan).
type InsertBuckets = SmallVec<[Option<u64>; 2]>;

impl Txn {
    fn entry_count(&self) -> usize {
        self.removes.len() + self.inserts.len()
    }
}

/// Calls `f` with the full name of a pinode, reading its long-name record when it has one,
/// without allocating.
pub fn with_full_name<R>(image: &Image, p: &Pinode, f: impl FnOnce(&[u8]) -> R) -> R {
    if usize::from(p.name_len) <= crate::format::pinode::INLINE_NAME_MAX {
        return f(p.inline_name());
    }
    f(image.long_name(u64::from(p.long_name.get())).name())
}

/// The full name of a pinode, as an owned vector.
pub fn full_name(image: &Image, p: &Pinode) -> Vec<u8> {
    with_full_name(image, p, <[u8]>::to_vec)
}

/// The NVM bucket a pinode belongs in.
pub fn bucket_of_pinode(image: &Image, p: &Pinode) -> u64 {
    let g = image.geometry();
    with_full_name(image, p, |name| {
        bucket_of(g.hash_seed, g.bucket_count(), p.parent.get(), name)
    })
}

/// Commits `txn` through directory log `log`, which the caller holds locked together with the
/// mirror buckets of every pinode involved, and which must be settled or the caller's own to
/// overwrite (`crate::settle`). Fences: 2.
///
/// Steps (seed 001, section III-E, with a checksummed commit record):
/// 1. write the new pinodes with their valid bit clear, and their long-name records; flush;
///    (new data, such as a symlink's extent and target, was written the same way by the caller);
/// 2. write one log entry per slot (operation and slot: the address, never the contents);
/// 3. commit: store the entry count and the CRC-32C of the entries and new records in the log's
///    tail (one atomic 8-byte store); flush entries and tail together, fence;
/// 4. apply: unlink removed slots and clear their valid bits, link inserted slots and set theirs,
///    store the derived in-place fields; flush, fence;
/// 5. clear the tail (one atomic 8-byte store), left in the cache: the log is *unsettled* until a
///    later commit through it, or a settle, writes the line back (`crate::settle`).
pub fn commit(image: &Image, log: u64, txn: &mut Txn) {
    let region = image.region();
    let g = image.geometry();
    let log_offset = g.dir_log_offset(log);
    let n = txn.entry_count();
    assert!(
        log != 0 && n > 0 && n <= DIR_LOG_ENTRIES,
        "transaction of {n} entries in log {log}"
    );
    assert_eq!(
        region.load_u64(log_offset),
        0,
        "directory log {log} is not empty"
    );

    // The entries (slots only) are composed first; the records' write-backs then run while the
    // rest of the commit is prepared.
    let mut entries = [0u64; DIR_LOG_ENTRIES];
    fill_log_entries(txn, &mut entries);
    let entries = &entries[..n];
    // 1. New records, invalid until applied. Each insert's hash_next is the head its bucket will
    //    have once this transaction's removes and earlier inserts are applied.
    let buckets = link_inserts_ahead(image, txn);
    for (slot, record) in &txn.long_names {
        let offset = g.long_name_offset(u64::from(*slot));
        region.write(offset, record);
        region.flush(offset, LONG_NAME_BYTES);
    }
    for (slot, p) in &txn.inserts {
        assert!(!p.is_valid(), "a new pinode version is written invalid");
        let offset = g.pinode_offset(u64::from(*slot));
        region.write(offset, p);
        region.flush(offset, PINODE_BYTES);
    }
    // 2. The entries.
    region.write_bytes(log_offset + 8, entries.as_bytes());
    // 3. The commit point: the count and a checksum of the entries and of every record above,
    //    in one atomic word. One fence makes records, entries and tail durable together; if a
    //    crash tears them, the checksum fails at mount and the commit is discarded, which is safe
    //    because everything it wrote is still invalid.
    debug_assert!(
        txn.in_place
            .iter()
            .all(|f| !txn.inserts.iter().any(|(slot, _)| {
                let start = g.pinode_offset(u64::from(*slot));
                (start..start + PINODE_BYTES).contains(&f.offset)
            })),
        "in-place stores never touch this transaction's new pinodes (the checksum covers them)"
    );
    // The checksum comes from the records this transaction holds, not from the media: reading
    // back a line whose write-back is still in flight stalls until it completes.
    let checksum = txn_checksum(image, txn, entries);
    region.store_u64(log_offset, tail_word(n as u64, checksum));
    // Entries and tail share the log's first line (up to 7 entries): one write-back for both,
    // in either order, since the checksum rejects a tail that persisted without its entries.
    region.flush(log_offset, 8 + 8 * n as u64);
    if !fault::active(fault::Fault::SkipCommitFence) {
        region.fence();
    }
    debug_assert_eq!(
        checksum,
        commit_checksum(image, entries),
        "the checksum of the records held equals what recovery computes from the media"
    );
    // 4. Apply, as recovery would (but from the records held, knowing the inserted slots are in
    //    no chain yet), and the derived in-place fields.
    apply_fresh(image, txn, &buckets, entries);
    store_in_place(image, &txn.in_place);
    if !fault::active(fault::Fault::SkipApplyFence) {
        region.fence();
    }
    // 5. Clear the log, in the cache only: the caller records the log as unsettled
    //    (`crate::settle` says when the clear must be durable, and makes it so).
    region.store_u64(log_offset, 0);

    debug_assert!(txn
        .removes
        .iter()
        .all(|&s| !image.pinode(u64::from(s)).is_valid()));
    debug_assert!(txn
        .inserts
        .iter()
        .all(|(s, _)| image.pinode(u64::from(*s)).is_valid()));
}

/// Stores derived in-place fields and writes back each line they touch once: a directory's mtime
/// and ctime share a line, and a write-back costs about as much as a fence here.
fn store_in_place(image: &Image, fields: &[InPlace]) {
    let region = image.region();
    let mut lines: SmallVec<[u64; 6]> = SmallVec::new();
    for field in fields {
        let bytes = field.value.to_le_bytes();
        region.write_bytes(field.offset, &bytes[..usize::from(field.len)]);
        lines.push(field.offset / CACHE_LINE);
    }
    lines.sort_unstable();
    lines.dedup();
    for line in lines {
        region.flush(line * CACHE_LINE, CACHE_LINE);
    }
}

fn fill_log_entries(txn: &Txn, out: &mut [u64; DIR_LOG_ENTRIES]) {
    let op = |data: &[u32], slot, with, without| if data.contains(&slot) { with } else { without };
    let removes = txn.removes.iter().map(|&slot| DirEntry {
        op: op(&txn.data_removes, slot, DIR_OP_REMOVE_DATA, DIR_OP_REMOVE),
        slot,
    });
    let inserts = txn.inserts.iter().map(|&(slot, _)| DirEntry {
        op: if txn.orphan_inserts.contains(&slot) {
            DIR_OP_ORPHAN
        } else {
            op(&txn.data_inserts, slot, DIR_OP_INSERT_DATA, DIR_OP_INSERT)
        },
        slot,
    });
    for (word, entry) in out.iter_mut().zip(removes.chain(inserts)) {
        *word = entry.encode();
    }
}

/// Sets each inserted pinode's `hash_next` to the head its bucket will have when it is linked;
/// returns the inserts' buckets.
fn link_inserts_ahead(image: &Image, txn: &mut Txn) -> InsertBuckets {
    let g = image.geometry();
    // (bucket, head after this transaction's changes so far); a transaction touches few buckets.
    let mut heads: SmallVec<[(u64, u32); 4]> = SmallVec::new();
    let mut buckets = InsertBuckets::new();
    for i in 0..txn.inserts.len() {
        let (slot, p) = &txn.inserts[i];
        if txn.orphan_inserts.contains(slot) {
            txn.inserts[i].1.hash_next = U32::new(0); // in no chain
            buckets.push(None);
            continue;
        }
        // A new record comes with the transaction; a kept one (a new version of the same name)
        // is already on the media.
        let fresh = txn
            .long_names
            .iter()
            .find(|(r, _)| *r == p.long_name.get() && *r != 0);
        let bucket = match fresh {
            Some((_, record)) => {
                bucket_of(g.hash_seed, g.bucket_count(), p.parent.get(), record.name())
            }
            None => bucket_of_pinode(image, p),
        };
        let head = match heads.iter().find(|(b, _)| *b == bucket) {
            Some(&(_, head)) => head,
            None => head_after_removes(image, bucket, &txn.removes),
        };
        let slot = *slot;
        buckets.push(Some(bucket));
        txn.inserts[i].1.hash_next = U32::new(head);
        match heads.iter_mut().find(|(b, _)| *b == bucket) {
            Some(entry) => entry.1 = slot,
            None => heads.push((bucket, slot)),
        }
    }
    buckets
}

/// The first slot of `bucket`'s chain that is not among `removed`.
fn head_after_removes(image: &Image, bucket: u64, removed: &[u32]) -> u32 {
    let mut slot = image.bucket(bucket).head.get();
    while slot != 0 && removed.contains(&slot) {
        slot = hash_next(image, slot);
    }
    slot
}

/// The `hash_next` link of the pinode at `slot`: a chain walk reads this word, not the record.
fn hash_next(image: &Image, slot: u32) -> u32 {
    let offset = image.geometry().pinode_offset(u64::from(slot)) + HASH_NEXT_OFFSET;
    image.region().read::<U32>(offset).get()
}

/// The apply step for committed entries, as recovery runs it: removes first, then inserts,
/// each idempotent (an earlier apply of these entries may have stopped anywhere, so each step
/// first checks whether it is already done). Flushes what it stores; the caller fences.
pub fn apply(image: &Image, entries: &[u64]) {
    let decoded = || {
        entries
            .iter()
            .map(|&w| DirEntry::decode(w).expect("committed entries were validated"))
    };
    apply_removes(image, decoded().filter(|e| !e.is_insert()));
    for e in decoded().filter(|e| e.is_insert()) {
        let p = image.pinode(u64::from(e.slot));
        if p.flags.get() & FLAG_VALID == 0 {
            set_flags(image, e.slot, p.flags.get() | FLAG_VALID);
        }
        if e.op == DIR_OP_ORPHAN {
            continue;
        }
        let bucket = bucket_of_pinode(image, &p);
        if !in_chain(image, bucket, e.slot) {
            set_head(image, bucket, e.slot);
        }
        if e.moves_data() {
            set_data(image, p.extent_head.get(), true);
        }
    }
}

/// The apply step right after [`commit`]'s commit point, under the locks that made it: the same
/// stores as [`apply`], but inserts come from the records the transaction holds (their lines were
/// just written back, and reading them again would stall) and are known to be in no chain yet.
fn apply_fresh(image: &Image, txn: &Txn, buckets: &InsertBuckets, entries: &[u64]) {
    let removes = entries
        .iter()
        .map(|&w| DirEntry::decode(w).expect("entries this commit wrote"))
        .filter(|e| !e.is_insert());
    apply_removes(image, removes);
    for ((slot, p), bucket) in txn.inserts.iter().zip(buckets) {
        set_flags(image, *slot, p.flags.get() | FLAG_VALID);
        let Some(bucket) = *bucket else {
            continue; // an orphan, in no chain
        };
        debug_assert!(
            !in_chain(image, bucket, *slot),
            "a fresh insert {slot} is already linked"
        );
        set_head(image, bucket, *slot);
        if txn.data_inserts.contains(slot) {
            set_data(image, p.extent_head.get(), true);
        }
    }
}

fn apply_removes(image: &Image, removes: impl Iterator<Item = DirEntry>) {
    for e in removes {
        let extent_head = apply_remove(image, e.slot);
        if e.moves_data() {
            set_data(image, extent_head, false);
        }
    }
}

/// Whether `slot` is in `bucket`'s chain.
fn in_chain(image: &Image, bucket: u64, slot: u32) -> bool {
    let mut at = image.bucket(bucket).head.get();
    while at != 0 && at != slot {
        at = hash_next(image, at);
    }
    at == slot
}

/// Frees an orphan (unlinked while open, then a crash): its data and its slot. Flushes; the
/// caller fences. It is in no hash chain, so nothing else refers to it.
pub fn free_orphan(image: &Image, slot: u32) {
    let p = image.pinode(u64::from(slot));
    if p.is_primary() {
        set_data(image, p.extent_head.get(), false);
    }
    set_flags(image, slot, p.flags.get() & !FLAG_VALID);
}

/// Frees the attribute pinode of an orphan that mount freed: unlinks it from its chain, clears
/// its extents and blocks, then its valid bit. Flushes; the caller fences. Its data goes before
/// its valid bit, so a crash in between leaves it to be freed again.
pub fn free_xattr_pinode(image: &Image, slot: u32) {
    let p = image.pinode(u64::from(slot));
    set_data(image, p.extent_head.get(), false);
    apply_remove(image, slot);
}

/// Sets (or clears) the valid bits of the extents in the list starting at `extent_head` (a
/// pinode's) and their blocks' bits in the bitmap. Idempotent. The walk is bounded and
/// range-checked, as the list is media content.
fn set_data(image: &Image, extent_head: u32, valid: bool) {
    let g = image.geometry();
    let mut eno = u64::from(extent_head);
    let mut steps = 0;
    while eno != 0 && eno < g.extent_count() && steps < g.extent_count() {
        let e = image.extent(eno);
        let flags = if valid {
            e.flags.get() | EXTENT_VALID
        } else {
            e.flags.get() & !EXTENT_VALID
        };
        if flags != e.flags.get() {
            let offset = g.extent_offset(eno) + EXTENT_FLAGS_OFFSET;
            image.region().write(offset, &U32::new(flags));
            image.region().flush(offset, 4);
        }
        let start = u64::from(e.start_block.get());
        let count = u64::from(e.block_count.get());
        if start + count <= g.data_block_count() {
            set_bitmap_bits(image, start, count, valid);
        }
        eno = u64::from(e.next.get());
        steps += 1;
    }
}

fn set_flags(image: &Image, slot: u32, flags: u32) {
    let offset = image.geometry().pinode_offset(u64::from(slot)) + FLAGS_OFFSET;
    image.region().write(offset, &U32::new(flags));
    image.region().flush(offset, 4);
}

fn set_head(image: &Image, bucket: u64, head: u32) {
    let offset = image.geometry().bucket_offset(bucket);
    let word = Bucket {
        head: U32::new(head),
        reserved: U32::new(0),
    }
    .to_word();
    image.region().store_u64(offset, word);
    image.region().flush(offset, 8);
}

/// Unlinks `slot` from its bucket's chain if it is there, and clears its valid bit. Returns the
/// pinode's extent list head.
fn apply_remove(image: &Image, slot: u32) -> u32 {
    let p = image.pinode(u64::from(slot));
    let bucket = bucket_of_pinode(image, &p);
    let next = p.hash_next.get();
    let mut prev: Option<u32> = None;
    let mut at = image.bucket(bucket).head.get();
    while at != 0 && at != slot {
        prev = Some(at);
        at = hash_next(image, at);
    }
    if at == slot {
        match prev {
            None => set_head(image, bucket, next),
            Some(prev) => {
                let offset = image.geometry().pinode_offset(u64::from(prev)) + HASH_NEXT_OFFSET;
                image.region().write(offset, &U32::new(next));
                image.region().flush(offset, 4);
            }
        }
    }
    if p.flags.get() & FLAG_VALID != 0 {
        set_flags(image, slot, p.flags.get() & !FLAG_VALID);
    }
    p.extent_head.get()
}

/// A tail word: entry count and commit checksum.
pub fn tail_word(count: u64, checksum: u32) -> u64 {
    count | (u64::from(checksum) << 32)
}

/// The checksum a commit's tail carries: CRC-32C over the entries and every record the commit
/// wrote for its inserts (pinodes, long names, and for INSERT_DATA the extents and their bytes),
/// with valid bits read as clear, since the apply step sets them after the commit point. Robust
/// to garbage: it runs on media content at mount, so every index is range-checked.
pub fn commit_checksum(image: &Image, entries: &[u64]) -> u32 {
    let g = image.geometry();
    let mut crc = crc32c::crc32c(entries.as_bytes());
    for e in entries
        .iter()
        .filter_map(|&w| DirEntry::decode(w).ok())
        .filter(|e| e.is_insert())
    {
        let slot = u64::from(e.slot);
        if slot == 0 || slot >= g.pinode_count() {
            continue;
        }
        let mut p = image.pinode(slot);
        p.flags = U32::new(p.flags.get() & !FLAG_VALID);
        crc = crc32c::crc32c_append(crc, p.as_bytes());
        let record = u64::from(p.long_name.get());
        if p.flags.get() & crate::format::pinode::FLAG_LONG_NAME != 0
            && record < g.long_name_count()
        {
            crc = crc32c::crc32c_append(crc, image.long_name(record).as_bytes());
        }
        if e.moves_data() {
            crc = checksum_data(image, &p, crc);
        }
    }
    crc
}

/// [`commit_checksum`] for a transaction about to commit, from the records it holds: the same
/// bytes in the same order (entries, then per insert its pinode, long name and data), without
/// reading back lines just written. Only data (a symlink's target) is read from the media.
fn txn_checksum(image: &Image, txn: &Txn, entries: &[u64]) -> u32 {
    let mut crc = crc32c::crc32c(entries.as_bytes());
    for (slot, p) in &txn.inserts {
        debug_assert!(!p.is_valid(), "new versions are held invalid");
        crc = crc32c::crc32c_append(crc, p.as_bytes());
        if p.flags.get() & crate::format::pinode::FLAG_LONG_NAME != 0 {
            let record = p.long_name.get();
            crc = match txn.long_names.iter().find(|(r, _)| *r == record) {
                Some((_, fresh)) => crc32c::crc32c_append(crc, fresh.as_bytes()),
                None => crc32c::crc32c_append(crc, image.long_name(u64::from(record)).as_bytes()),
            };
        }
        if txn.data_inserts.contains(slot) && !txn.orphan_inserts.contains(slot) {
            crc = checksum_data(image, p, crc);
        }
    }
    crc
}

fn checksum_data(image: &Image, p: &Pinode, mut crc: u32) -> u32 {
    let g = image.geometry();
    let mut eno = u64::from(p.extent_head.get());
    let mut steps = 0;
    while eno != 0 && eno < g.extent_count() && steps < g.extent_count() {
        let mut e = image.extent(eno);
        e.flags = U32::new(e.flags.get() & !EXTENT_VALID);
        crc = crc32c::crc32c_append(crc, e.as_bytes());
        let start = u64::from(e.start_block.get());
        let (offset, length) = (u64::from(e.block_offset.get()), u64::from(e.length.get()));
        let blocks = (offset + length).div_ceil(crate::format::BLOCK_SIZE);
        if start + blocks <= g.data_block_count() && length <= crate::format::BLOCK_SIZE * 16 {
            let at = g.block_offset(start) + offset;
            crc = image.region().crc32c_append(crc, at, length);
        }
        eno = u64::from(e.next.get());
        steps += 1;
    }
    crc
}

/// What recovery did with the directory journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Committed logs applied again.
    pub replayed: u64,
    /// Logs whose commit was torn by a crash (checksum mismatch) and so never happened.
    pub discarded: u64,
}

/// Whether the commit in `log` is intact: its checksum matches. `None` when the log is empty.
pub fn log_intact(image: &Image, log: u64) -> Option<bool> {
    let l = image.dir_log(log);
    let tail = l.tail.get();
    if tail == 0 {
        return None;
    }
    let count = (tail & TAIL_COUNT_MASK).min(DIR_LOG_ENTRIES as u64) as usize;
    let entries: SmallVec<[u64; DIR_LOG_ENTRIES]> =
        l.entries[..count].iter().map(|w| w.get()).collect();
    Some(commit_checksum(image, &entries) == (tail >> 32) as u32)
}

/// Recovery: applies every intact committed directory log, discards torn ones, and clears them.
/// The caller has validated the entries of intact logs.
pub fn replay(image: &Image) -> ReplayReport {
    let g = image.geometry();
    let mut report = ReplayReport::default();
    for log in 1..g.dir_log_count() {
        let Some(intact) = log_intact(image, log) else {
            continue;
        };
        if intact {
            let l = image.dir_log(log);
            let count = (l.tail.get() & TAIL_COUNT_MASK) as usize;
            let entries: SmallVec<[u64; DIR_LOG_ENTRIES]> =
                l.entries[..count].iter().map(|w| w.get()).collect();
            apply(image, &entries);
            image.region().fence();
            report.replayed += 1;
        } else {
            report.discarded += 1;
        }
        image.region().store_u64_persist(g.dir_log_offset(log), 0);
    }
    report
}
