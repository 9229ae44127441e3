//! File-data transactions through the file journal (seed 001, III-D "batch-write" and III-E).
//!
//! An fsync (or a truncate, or a write in `sync` mode) turns the file's pending pieces into
//! extents and retires the extents they replace, in one transaction: [`commit`] is the one
//! function that makes it durable and atomic. The log names extents by number (their addresses),
//! never their contents; new extents are written with their valid bit clear before the commit
//! point. The apply step (`file::apply`) is shared with recovery and idempotent, so a crash
//! at any point (also during recovery) is repaired by applying the committed log again.

use smallvec::SmallVec;
use zerocopy::little_endian::{I64, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

use crate::format::extent::{Extent, EXTENT_BYTES, FLAG_VALID as EXTENT_VALID};
use crate::format::journal::{
    decode_file_words, FileEntry, FileLog, FileMove, FILE_LOG_DATA_FENCED, FILE_LOG_ENTRIES,
    FILE_MOVE_WORDS, FILE_OVERFLOW_ENTRIES,
};
use crate::format::pinode::{self, FLAG_VALID};
use crate::format::BLOCK_SIZE;
use crate::image::Image;

use crate::journal::{fault, TAIL_COUNT_MASK};

use super::apply::{
    apply_links, apply_moves, apply_retire, flush_moves, moved_ranges, subtract, BitmapChanges,
};

/// Offset of the entries in a file log.
const ENTRIES_OFFSET: u64 = 56;
/// Offset of the next-block word in an overflow block.
const OVERFLOW_NEXT_OFFSET: u64 = 8 * FILE_OVERFLOW_ENTRIES as u64;
/// Most dirty bytes a checksum covers when recovery recomputes it; a commit claiming more is torn.
const CHECKSUM_DATA_LIMIT_BYTES: u64 = 64 << 20;

/// One file transaction.
#[derive(Debug)]
pub struct FileCommit<'a> {
    /// The file.
    pub ino: u64,
    /// Its primary pinode's slot (the caller holds the inode lock, so it cannot change).
    pub slot: u32,
    /// Its size after the commit.
    pub size: u64,
    /// Its modification and change time after the commit.
    pub mtime_ns: i64,
    /// Its first and last extent after the commit (0 when it has none).
    pub head: u32,
    /// See `head`.
    pub last: u32,
    /// New extents, written here with their valid bit clear: (eno, record).
    pub new: &'a [(u32, Extent)],
    /// Extents leaving the file's list.
    pub removed: &'a [u32],
    /// Extents that stay in the list, their data moved to new blocks (only on an image with
    /// moves, `Geometry::moves`).
    pub moves: &'a [FileMove],
    /// Whether the caller's new data is large enough that a fence is cheaper than checksumming
    /// it; then it is fenced before the commit point instead.
    pub data_fenced: bool,
}

impl FileCommit<'_> {
    /// Words the commit logs: new and removed extents paired up, then three per move; at least one
    /// (a commit of size or times alone logs one empty pair).
    pub fn entry_count(&self) -> usize {
        self.pair_count() + FILE_MOVE_WORDS * self.moves.len()
    }

    /// Pairs the commit logs: one empty pair when it has neither pairs nor moves.
    fn pair_count(&self) -> usize {
        let pairs = self.new.len().max(self.removed.len());
        if pairs == 0 && self.moves.is_empty() {
            1
        } else {
            pairs
        }
    }

    /// Log word `i`: a pair, or a move's first or second word.
    fn word(&self, i: usize) -> u64 {
        let pairs = self.pair_count();
        if i < pairs {
            return self.entry(i).encode();
        }
        self.moves[(i - pairs) / FILE_MOVE_WORDS].encode()[(i - pairs) % FILE_MOVE_WORDS]
    }

    /// Overflow blocks the commit needs beyond its log.
    pub fn overflow_blocks_needed(&self) -> usize {
        self.entry_count()
            .saturating_sub(FILE_LOG_ENTRIES)
            .div_ceil(FILE_OVERFLOW_ENTRIES)
    }

    fn entry(&self, i: usize) -> FileEntry {
        FileEntry {
            old: self.removed.get(i).copied().unwrap_or(0),
            new: self.new.get(i).map_or(0, |(eno, _)| *eno),
        }
    }
}

/// Commits `c` through file log `log`, which the caller owns, with `overflow` blocks lent to it
/// (as many as [`FileCommit::overflow_blocks_needed`]). `still_used(block)` says whether a block
/// holds bytes of an extent the file keeps or gains. Fences: 2, or 3 with `data_fenced`. The
/// log is left unsettled: the caller records it ([`crate::settle`]) before freeing the log.
///
/// Steps:
/// 1. write the new extents with their valid bit clear, and flush them (the data itself was
///    written and flushed by `write`); with `data_fenced`, fence, so data and records are durable;
/// 2. write the log header (ino, size, time, slot, head, last, flags, overflow link) and the
///    entries (old and new extent numbers: addresses, never contents); flush overflow blocks;
/// 3. commit: store the entry count and the CRC-32C of header, entries, new records and (unless
///    fenced) new data in `tail`, one atomic 8-byte store; flush header, entries and tail
///    together, fence;
/// 4. apply: set the bitmap bits of blocks the new extents gain and clear those of blocks no
///    extent of the file holds any more (the atomic word updates first, flushed last), validate
///    and link the new extents, point the pinode at the list, retire the removed extents, store
///    size and times in the pinode; flush, fence;
/// 5. clear `tail` (one atomic 8-byte store), left in the cache: the log is *unsettled* until a
///    later commit through it, or a settle, writes the line back ([`crate::settle`]).
pub fn commit(
    image: &Image,
    log: u64,
    overflow: &[u64],
    c: &FileCommit<'_>,
    still_used: &dyn Fn(u64) -> bool,
) {
    let region = image.region();
    let g = image.geometry();
    let log_offset = g.file_log_offset(log);
    let n = c.entry_count();
    assert!(log != 0, "file log 0 is reserved");
    assert_eq!(overflow.len(), c.overflow_blocks_needed());
    assert_eq!(
        region.load_u64(log_offset),
        0,
        "file log {log} is not empty"
    );
    assert!(c.new.iter().all(|(_, e)| !e.is_valid()));
    assert!(c
        .removed
        .iter()
        .all(|&o| image.extent(u64::from(o)).is_valid()));
    assert!(
        c.moves.is_empty() || g.moves,
        "moves on an image without them"
    );
    debug_assert!(c.moves.iter().all(|m| {
        let e = image.extent(u64::from(m.eno));
        e.is_valid() && e.start_block.get() == m.old_start && e.ino.get() == c.ino
    }));

    // The header and entries are composed first; the records' write-backs then run while the
    // rest of the commit is prepared.
    let header = compose_header(c, overflow);
    // 1. New extents, invalid until applied.
    for (eno, record) in c.new {
        let offset = g.extent_offset(u64::from(*eno));
        region.write(offset, record);
        region.flush(offset, EXTENT_BYTES);
    }
    if c.data_fenced {
        region.fence();
    }
    // 2. Header and entries.
    let log_bytes = write_header_and_entries(image, log, overflow, c, &header);
    // 3. The commit point. The checksum comes from the header, entries and records in hand, not
    //    read back from lines whose write-back is in flight (that stalls); only new data is read.
    //    Header, entries and tail share the log's lines, written back once, in any order: the
    //    checksum rejects a tail that persisted without them.
    let entries: SmallVec<[FileEntry; 8]> = (0..c.pair_count()).map(|i| c.entry(i)).collect();
    let checksum =
        checksum_of(image, &header, &entries, c.moves, Some(c.new)).expect("records in hand");
    region.store_u64(log_offset, n as u64 | (u64::from(checksum) << 32));
    region.flush(log_offset, log_bytes);
    //    The bitmap changes are planned while the log's lines are written back: reads of records
    //    nothing has changed yet, in the shadow of the wait.
    let mut bits = BitmapChanges::default();
    bits.plan_links(image, &entries, c.moves, Some(c.new));
    bits.plan_retire(image, &entries, c.moves, Some(c.new), still_used);
    if !fault::active(fault::Fault::SkipCommitFence) {
        region.fence();
    }
    debug_assert_eq!(
        Some(checksum),
        commit_checksum(image, log, n as u64),
        "the checksum of the records in hand equals what recovery computes from the media"
    );
    // 4. Apply.
    debug_assert_eq!(
        read_entries(image, log, n as u64),
        Ok((entries.to_vec(), c.moves.to_vec()))
    );
    //    The bitmap's atomic updates first, while nothing is in flight since the commit fence
    //    (each would otherwise wait for the write-backs before it: a fence's cost apiece).
    bits.update(image);
    //    The moves' records are written back after the links: a link check reading such a
    //    line (an append grown in place is also the file's last extent) would otherwise wait
    //    for its write-back.
    apply_moves(image, c.moves);
    apply_links(image, &header, &entries, Some(c.new));
    apply_retire(image, &entries);
    flush_moves(image, c.moves);
    bits.flush(image);
    if !fault::active(fault::Fault::SkipApplyFence) {
        region.fence();
    }
    // 5. Clear the log, in the cache only: the caller records the log as unsettled
    //    (`crate::settle` says when the clear must be durable, and makes it so).
    region.store_u64(log_offset, 0);

    debug_assert!(c
        .new
        .iter()
        .all(|(eno, _)| image.extent(u64::from(*eno)).is_valid()));
    debug_assert!(c
        .removed
        .iter()
        .all(|&o| !image.extent(u64::from(o)).is_valid()));
    debug_assert!(c
        .moves
        .iter()
        .all(|m| image.extent(u64::from(m.eno)).start_block.get() == m.new_start));
    debug_assert_eq!(
        image.pinode(u64::from(c.slot)).extent_head.get(),
        c.head,
        "the pinode points at the new list"
    );
}

/// The log header of commit `c` (tail zero), with the entries that fit in the log itself.
fn compose_header(c: &FileCommit<'_>, overflow: &[u64]) -> FileLog {
    let n = c.entry_count();
    let mut header = FileLog::new_zeroed();
    header.ino = U64::new(c.ino);
    header.size = U64::new(c.size);
    header.mtime_ns = I64::new(c.mtime_ns);
    header.slot = U32::new(c.slot);
    header.head = U32::new(c.head);
    header.last = U32::new(c.last);
    header.flags = U32::new(if c.data_fenced {
        FILE_LOG_DATA_FENCED
    } else {
        0
    });
    header.overflow = U64::new(overflow.first().map_or(0, |b| b + 1));
    for (i, word) in header.entries.iter_mut().enumerate().take(n) {
        *word = U64::new(c.word(i));
    }
    header
}

/// Writes the log header and entries of `c` (the overflow blocks' entries flushed); returns how
/// many bytes of the log (from its start) the commit must write back with its tail.
fn write_header_and_entries(
    image: &Image,
    log: u64,
    overflow: &[u64],
    c: &FileCommit<'_>,
    header: &FileLog,
) -> u64 {
    let region = image.region();
    let g = image.geometry();
    let log_offset = g.file_log_offset(log);
    let n = c.entry_count();
    let here = n.min(FILE_LOG_ENTRIES) as u64;
    let bytes = &header.as_bytes()[8..(ENTRIES_OFFSET + 8 * here) as usize];
    region.write_bytes(log_offset + 8, bytes);
    for (k, &block) in overflow.iter().enumerate() {
        let first = FILE_LOG_ENTRIES + k * FILE_OVERFLOW_ENTRIES;
        let last = (first + FILE_OVERFLOW_ENTRIES).min(n);
        let words: Vec<u64> = (first..last).map(|i| c.word(i)).collect();
        let base = g.block_offset(block);
        region.write_bytes(base, words.as_bytes());
        let next = overflow.get(k + 1).map_or(0, |b| b + 1);
        region.write(base + OVERFLOW_NEXT_OFFSET, &U64::new(next));
        region.flush(base, BLOCK_SIZE);
    }
    ENTRIES_OFFSET + 8 * here
}

/// The entries of file log `log` (`count` words, following its overflow chain): its pairs and
/// its moves, or why they cannot be read. Robust to garbage: every block number is
/// range-checked.
pub fn read_entries(
    image: &Image,
    log: u64,
    count: u64,
) -> Result<(Vec<FileEntry>, Vec<FileMove>), String> {
    let g = image.geometry();
    let header = image.file_log(log);
    let here = count.min(FILE_LOG_ENTRIES as u64) as usize;
    let mut entries: Vec<u64> = header.entries[..here].iter().map(|w| w.get()).collect();
    let mut link = header.overflow.get();
    while (entries.len() as u64) < count {
        if link == 0 || link > g.data_block_count() {
            return Err(format!("overflow link {link} is not a data block"));
        }
        let base = g.block_offset(link - 1);
        let want = (count - entries.len() as u64).min(FILE_OVERFLOW_ENTRIES as u64);
        for i in 0..want {
            entries.push(image.region().load_u64(base + 8 * i));
        }
        link = image.region().load_u64(base + OVERFLOW_NEXT_OFFSET);
    }
    let (pairs, moves) = decode_file_words(&entries)?;
    if !moves.is_empty() && !g.moves {
        return Err("a move on an image without moves".into());
    }
    Ok((pairs, moves))
}

/// A record's data-zone byte range, if it lies inside the data zone.
pub(super) fn data_range(image: &Image, e: &Extent) -> Option<(u64, u64)> {
    let g = image.geometry();
    let start = u64::from(e.start_block.get());
    let blocks = Extent::blocks_needed(u64::from(e.block_offset.get()), u64::from(e.length.get()));
    (start + blocks <= g.data_block_count()).then(|| {
        let addr = start * BLOCK_SIZE + u64::from(e.block_offset.get());
        (addr, u64::from(e.length.get()))
    })
}

/// The checksum a file commit's tail carries: CRC-32C over the header after `tail`, the entries
/// (pairs, then moves, as logged), each new extent (valid bit read as clear), and unless
/// `DATA_FENCED` the bytes of each new extent that no removed extent held (the data written since
/// the last commit; bytes a new extent shares with one it replaces were made durable by an
/// earlier commit), then each moved extent's bytes at its new run (all written since the last
/// commit). `None` when the log cannot be read (a torn commit's garbage). Runs on media content
/// at mount, so everything is checked.
pub fn commit_checksum(image: &Image, log: u64, count: u64) -> Option<u32> {
    let (entries, moves) = read_entries(image, log, count).ok()?;
    checksum_of(image, &image.file_log(log), &entries, &moves, None)
}

/// The new extent record of entry `i`: from `fresh` (the commit's records in hand, entry `i`'s
/// new extent being `fresh[i]`) when given, else from the media.
pub(super) fn new_record(
    image: &Image,
    entries: &[FileEntry],
    i: usize,
    fresh: Fresh<'_>,
) -> Extent {
    match fresh {
        Some(records) => {
            debug_assert_eq!(records[i].0, entries[i].new);
            records[i].1.clone()
        }
        None => image.extent(u64::from(entries[i].new)),
    }
}

/// The new extent records of a commit in hand, in entry order; `None` at recovery.
pub(super) type Fresh<'a> = Option<&'a [(u32, Extent)]>;

/// [`commit_checksum`] of a header and entries already in hand.
fn checksum_of(
    image: &Image,
    header: &FileLog,
    entries: &[FileEntry],
    moves: &[FileMove],
    fresh: Fresh<'_>,
) -> Option<u32> {
    let g = image.geometry();
    let mut crc = crc32c::crc32c(&header.as_bytes()[8..ENTRIES_OFFSET as usize]);
    for e in entries {
        crc = crc32c::crc32c_append(crc, &e.encode().to_le_bytes());
    }
    for m in moves {
        crc = crc32c::crc32c_append(crc, m.encode().as_bytes());
    }
    let in_table = |eno: u32| eno != 0 && u64::from(eno) < g.extent_count();
    let fenced = header.flags.get() & FILE_LOG_DATA_FENCED != 0;
    // The bytes the old side held, of extents leaving the list and of moved extents: a new
    // extent or a moved one that holds some of them (the rest of an extent a write cut) holds
    // nothing new there.
    let mut old: SmallVec<[(u64, u64); 8]> = entries
        .iter()
        .filter(|e| in_table(e.old))
        .filter_map(|e| data_range(image, &image.extent(u64::from(e.old))))
        .collect();
    if !fenced {
        for m in moves {
            old.push(moved_ranges(image, m)?.1);
        }
    }
    old.sort_unstable();
    let mut data_bytes = 0u64;
    for (i, _) in entries.iter().enumerate().filter(|(_, e)| in_table(e.new)) {
        let mut record = new_record(image, entries, i, fresh);
        record.flags = U32::new(record.flags.get() & !EXTENT_VALID);
        crc = crc32c::crc32c_append(crc, record.as_bytes());
        if fenced {
            continue;
        }
        let (addr, len) = data_range(image, &record)?;
        for (a, l) in subtract(addr, len, &old) {
            data_bytes += l;
            if data_bytes > CHECKSUM_DATA_LIMIT_BYTES {
                return None;
            }
            crc = image.region().crc32c_append(crc, g.block_offset(0) + a, l);
        }
    }
    if fenced {
        return Some(crc);
    }
    for m in moves {
        let (new, _) = moved_ranges(image, m)?;
        for (a, l) in subtract(new.0, new.1, &old) {
            data_bytes += l;
            if data_bytes > CHECKSUM_DATA_LIMIT_BYTES {
                return None;
            }
            crc = image.region().crc32c_append(crc, g.block_offset(0) + a, l);
        }
    }
    Some(crc)
}

/// What recovery did with the file journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileReplayReport {
    /// Committed logs applied again.
    pub replayed: u64,
    /// Logs whose commit a crash tore (checksum mismatch), discarded.
    pub discarded: u64,
    /// Intact logs of files a later directory commit moved or removed ([`superseded`]), skipped.
    pub superseded: u64,
}

/// Whether the commit in file log `log` is intact. `None` when the log is empty.
pub fn log_intact(image: &Image, log: u64) -> Option<bool> {
    let tail = image.file_log(log).tail.get();
    if tail == 0 {
        return None;
    }
    let count = tail & TAIL_COUNT_MASK;
    let limit = FILE_LOG_ENTRIES as u64
        + image.geometry().data_block_count() * FILE_OVERFLOW_ENTRIES as u64;
    if count == 0 || count > limit {
        return Some(false);
    }
    Some(commit_checksum(image, log, count) == Some((tail >> 32) as u32))
}

/// Checks that an intact committed file log names only things apply may touch.
pub fn validate(image: &Image, log: u64) -> Result<(), String> {
    let g = image.geometry();
    let header = image.file_log(log);
    let count = header.tail.get() & TAIL_COUNT_MASK;
    let (entries, moves) = read_entries(image, log, count)?;
    let in_table = |eno: u32| u64::from(eno) < g.extent_count();
    // A moved extent's validity is state, not structure: a later unlink clears it, and then the
    // record is superseded ([`superseded`], asked after the directory logs are replayed).
    for m in &moves {
        let usable = moved_ranges(image, m).is_some()
            && image.extent(u64::from(m.eno)).ino.get() == header.ino.get();
        if !usable {
            return Err(format!("moved extent {} is not usable", m.eno));
        }
    }
    for (i, e) in entries.iter().enumerate() {
        if !in_table(e.old) || !in_table(e.new) {
            return Err(format!("entry {i} names an extent past the table"));
        }
        if e.new != 0 {
            let r = image.extent(u64::from(e.new));
            let links_ok = in_table(r.prev.get()) && in_table(r.next.get());
            if data_range(image, &r).is_none() || !links_ok || r.ino.get() != header.ino.get() {
                return Err(format!("new extent {} is not usable", e.new));
            }
        }
    }
    if !in_table(header.head.get()) || !in_table(header.last.get()) {
        return Err("head or last extent past the table".into());
    }
    if header.flags.get() & !crate::format::journal::FILE_LOG_KNOWN_FLAGS != 0 {
        return Err(format!("unknown flags {:#x}", header.flags.get()));
    }
    let slot = u64::from(header.slot.get());
    if slot == 0 || slot >= g.pinode_count() {
        return Err(format!("slot {slot} is past the pinode table"));
    }
    Ok(())
}

/// Whether the intact committed (and validated) file log `log` was superseded: its slot no
/// longer holds its file's primary pinode, because a later directory commit moved that pinode
/// (rename, attribute change) or removed the file, after this commit's apply step was durable.
/// Such a record is left over from a lazily cleared log and is not replayed (`settle`, rule 3).
/// Asked after the directory logs are replayed.
pub fn superseded(image: &Image, log: u64) -> bool {
    let header = image.file_log(log);
    let p = image.pinode(u64::from(header.slot.get()));
    let holds_the_file = p.flags.get() & FLAG_VALID != 0
        && p.is_primary()
        && p.ino.get() == header.ino.get()
        && p.mode.get() & pinode::S_IFMT == pinode::S_IFREG;
    !holds_the_file
}

/// Recovery: applies every intact committed file log that is not [`superseded`], discards torn
/// ones, and clears them all. The caller has run [`validate`] on the intact ones and replayed the
/// directory logs.
pub fn replay(image: &Image) -> FileReplayReport {
    let g = image.geometry();
    let mut report = FileReplayReport::default();
    for log in 1..g.file_log_count() {
        let Some(intact) = log_intact(image, log) else {
            continue;
        };
        if intact && superseded(image, log) {
            report.superseded += 1;
        } else if intact {
            let header = image.file_log(log);
            let count = header.tail.get() & TAIL_COUNT_MASK;
            let (entries, moves) = read_entries(image, log, count).expect("validated");
            apply_moves(image, &moves);
            apply_links(image, &header, &entries, None);
            flush_moves(image, &moves);
            let mut kept = list_blocks(image, header.head.get());
            kept.sort_unstable();
            let mut bits = BitmapChanges::default();
            bits.plan_links(image, &entries, &moves, None);
            // A file's extents share at most their boundary blocks, so the last run starting at
            // or before a block is the only one that can hold it.
            bits.plan_retire(image, &entries, &moves, None, &|b| {
                let i = kept.partition_point(|&(s, _)| s <= b);
                i > 0 && kept[i - 1].0 + kept[i - 1].1 > b
            });
            apply_retire(image, &entries);
            bits.update(image);
            bits.flush(image);
            image.region().fence();
            report.replayed += 1;
        } else {
            report.discarded += 1;
        }
        image.region().store_u64_persist(g.file_log_offset(log), 0);
    }
    report
}

/// The block runs of the extent list from `head`, walked with a bound (media content).
fn list_blocks(image: &Image, head: u32) -> Vec<(u64, u64)> {
    let g = image.geometry();
    let mut runs = Vec::new();
    let mut eno = u64::from(head);
    while eno != 0 && eno < g.extent_count() && (runs.len() as u64) < g.extent_count() {
        let e = image.extent(eno);
        runs.push((
            u64::from(e.start_block.get()),
            u64::from(e.block_count.get()),
        ));
        eno = u64::from(e.next.get());
    }
    runs
}
