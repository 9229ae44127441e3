//! Namespace transactions through the directory journal (the paper's address-only redo log).
//!
//! A transaction removes some pinode slots from the namespace and inserts freshly written ones.
//! [`commit`] is the one function that makes it durable and atomic; [`apply`] is its apply step,
//! shared with recovery, and idempotent so a crash at any point (also during recovery) is repaired
//! by applying the committed log again.

use std::collections::HashMap;

use zerocopy::little_endian::U32;

use crate::format::hash_table::{bucket_of, Bucket};
use crate::format::journal::{DirEntry, DIR_LOG_ENTRIES, DIR_OP_INSERT, DIR_OP_REMOVE};
use crate::format::long_name::{LongName, LONG_NAME_BYTES};
use crate::format::pinode::{Pinode, FLAG_VALID, PINODE_BYTES};
use crate::image::Image;

/// Offset of `flags` in a pinode.
const FLAGS_OFFSET: u64 = 16;
/// Offset of `hash_next` in a pinode.
const HASH_NEXT_OFFSET: u64 = 68;

/// One namespace transaction.
#[derive(Debug, Default)]
pub struct Txn {
    /// Slots leaving the namespace (their valid bit is cleared).
    pub removes: Vec<u32>,
    /// New pinode versions to write (valid bit clear until applied) and insert.
    pub inserts: Vec<(u32, Pinode)>,
    /// Long-name records the inserted pinodes refer to.
    pub long_names: Vec<(u32, LongName)>,
    /// Derived fields (link counts, directory times) stored in place during the apply step, under
    /// its fence. They are not logged: mount recomputes link counts, and a time may lag by the
    /// operation a crash interrupted.
    pub in_place: Vec<(u64, Vec<u8>)>,
}

impl Txn {
    fn entry_count(&self) -> usize {
        self.removes.len() + self.inserts.len()
    }
}

/// The full name of a pinode, reading its long-name record when it has one.
pub fn full_name(image: &Image, p: &Pinode) -> Vec<u8> {
    if usize::from(p.name_len) <= crate::format::pinode::INLINE_NAME_MAX {
        return p.inline_name().to_vec();
    }
    image
        .long_name(u64::from(p.long_name.get()))
        .name()
        .to_vec()
}

/// The NVM bucket a pinode belongs in.
pub fn bucket_of_pinode(image: &Image, p: &Pinode) -> u64 {
    let g = image.geometry();
    bucket_of(
        g.hash_seed,
        g.bucket_count(),
        p.parent.get(),
        &full_name(image, p),
    )
}

/// Commits `txn` through directory log `log`, which the caller holds locked together with the
/// mirror buckets of every pinode involved. Fences: 4.
///
/// Steps (seed 001, section III-E):
/// 1. write the new pinodes with their valid bit clear, and their long-name records; flush;
/// 2. write one log entry per slot (operation and slot: the address, never the contents); flush;
/// 3. fence: records and entries are durable;
/// 4. commit: store the entry count in the log's tail (one atomic 8-byte store); flush, fence;
/// 5. apply: unlink removed slots and clear their valid bits, link inserted slots and set theirs,
///    store the derived in-place fields; flush, fence;
/// 6. clear the tail (one atomic 8-byte store); flush, fence.
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

    // 1. New records, invalid until applied. Each insert's hash_next is the head its bucket will
    //    have once this transaction's removes and earlier inserts are applied.
    link_inserts_ahead(image, txn);
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
    let entries = log_entries(txn);
    for (i, word) in entries.iter().enumerate() {
        region.write(log_offset + 8 + 8 * i as u64, &word.to_le_bytes());
    }
    region.flush(log_offset + 8, 8 * n as u64);
    // 3. Records and entries durable before the commit point.
    region.fence();
    // 4. Commit point.
    region.store_u64_persist(log_offset, n as u64);
    // 5. Apply, idempotently, as recovery would, and the derived in-place fields.
    apply(image, &entries);
    for (offset, bytes) in &txn.in_place {
        region.write_bytes(*offset, bytes);
        region.flush(*offset, bytes.len() as u64);
    }
    region.fence();
    // 6. Clear the log.
    region.store_u64_persist(log_offset, 0);

    debug_assert!(txn
        .removes
        .iter()
        .all(|&s| !image.pinode(u64::from(s)).is_valid()));
    debug_assert!(txn
        .inserts
        .iter()
        .all(|(s, _)| image.pinode(u64::from(*s)).is_valid()));
}

fn log_entries(txn: &Txn) -> Vec<u64> {
    let removes = txn.removes.iter().map(|&slot| DirEntry {
        op: DIR_OP_REMOVE,
        slot,
    });
    let inserts = txn.inserts.iter().map(|&(slot, _)| DirEntry {
        op: DIR_OP_INSERT,
        slot,
    });
    removes.chain(inserts).map(DirEntry::encode).collect()
}

/// Sets each inserted pinode's `hash_next` to the head its bucket will have when it is linked.
fn link_inserts_ahead(image: &Image, txn: &mut Txn) {
    let mut heads: HashMap<u64, u32> = HashMap::new();
    let long_names: HashMap<u32, &LongName> = txn.long_names.iter().map(|(s, r)| (*s, r)).collect();
    for (slot, p) in &mut txn.inserts {
        // A new record comes with the transaction; a kept one (a new version of the same name)
        // is already on the media.
        let name = match long_names.get(&p.long_name.get()) {
            Some(record) if p.long_name.get() != 0 => record.name().to_vec(),
            _ => full_name(image, p),
        };
        let g = image.geometry();
        let bucket = bucket_of(g.hash_seed, g.bucket_count(), p.parent.get(), &name);
        let head = *heads
            .entry(bucket)
            .or_insert_with(|| head_after_removes(image, bucket, &txn.removes));
        p.hash_next = U32::new(head);
        heads.insert(bucket, *slot);
    }
}

/// The first slot of `bucket`'s chain that is not among `removed`.
fn head_after_removes(image: &Image, bucket: u64, removed: &[u32]) -> u32 {
    let mut slot = image.bucket(bucket).head.get();
    while slot != 0 && removed.contains(&slot) {
        slot = image.pinode(u64::from(slot)).hash_next.get();
    }
    slot
}

/// The apply step for committed entries: removes first, then inserts, each idempotent. Flushes
/// what it stores; the caller fences.
pub fn apply(image: &Image, entries: &[u64]) {
    let decoded: Vec<DirEntry> = entries
        .iter()
        .map(|&w| DirEntry::decode(w).expect("committed entries were validated"))
        .collect();
    for e in decoded.iter().filter(|e| e.op == DIR_OP_REMOVE) {
        apply_remove(image, e.slot);
    }
    for e in decoded.iter().filter(|e| e.op == DIR_OP_INSERT) {
        apply_insert(image, e.slot);
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

/// Unlinks `slot` from its bucket's chain if it is there, and clears its valid bit.
fn apply_remove(image: &Image, slot: u32) {
    let p = image.pinode(u64::from(slot));
    let bucket = bucket_of_pinode(image, &p);
    let next = p.hash_next.get();
    let mut prev: Option<u32> = None;
    let mut at = image.bucket(bucket).head.get();
    while at != 0 && at != slot {
        prev = Some(at);
        at = image.pinode(u64::from(at)).hash_next.get();
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
}

/// Links `slot` at the head of its bucket if it is not in the chain yet, and sets its valid bit.
/// Its `hash_next` was made durable before the commit, pointing at the head it goes in front of.
fn apply_insert(image: &Image, slot: u32) {
    let p = image.pinode(u64::from(slot));
    let bucket = bucket_of_pinode(image, &p);
    let mut at = image.bucket(bucket).head.get();
    while at != 0 && at != slot {
        at = image.pinode(u64::from(at)).hash_next.get();
    }
    if p.flags.get() & FLAG_VALID == 0 {
        set_flags(image, slot, p.flags.get() | FLAG_VALID);
    }
    if at != slot {
        set_head(image, bucket, slot);
    }
}

/// Recovery: applies every committed directory log and clears it. Returns the logs replayed.
pub fn replay(image: &Image) -> u64 {
    let g = image.geometry();
    let mut replayed = 0;
    for log in 1..g.dir_log_count() {
        let tail = image.dir_log(log).tail.get();
        if tail == 0 {
            continue;
        }
        let entries: Vec<u64> = image.dir_log(log).entries[..tail as usize]
            .iter()
            .map(|w| w.get())
            .collect();
        apply(image, &entries);
        image.region().fence();
        image.region().store_u64_persist(g.dir_log_offset(log), 0);
        replayed += 1;
    }
    replayed
}
