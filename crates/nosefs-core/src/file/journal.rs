//! File-data transactions through the file journal (seed 001, III-D "batch-write" and III-E).
//!
//! An fsync (or a truncate, or a write in `sync` mode) turns the file's pending pieces into
//! extents and retires the extents they replace, in one transaction: [`commit`] is the one
//! function that makes it durable and atomic. The log names extents by number (their addresses),
//! never their contents; new extents are written with their valid bit clear before the commit
//! point. [`apply_links`] and [`apply_retire`] are the apply step, shared with recovery and
//! idempotent, so a crash at any point (also during recovery) is repaired by applying the
//! committed log again.

use smallvec::SmallVec;
use zerocopy::little_endian::{I64, U16, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

use crate::format::extent::{Extent, EXTENT_BYTES, FLAG_VALID as EXTENT_VALID};
use crate::format::journal::{
    decode_file_words, FileEntry, FileLog, FileMove, FILE_LOG_DATA_FENCED, FILE_LOG_ENTRIES,
    FILE_MOVE_WORDS, FILE_OVERFLOW_ENTRIES,
};
use crate::format::pinode::{self, FLAG_VALID};
use crate::format::BLOCK_SIZE;
use crate::image::Image;

use crate::journal::{fault, flush_bitmap_bits, update_bitmap_bits, TAIL_COUNT_MASK};

/// Offsets of fields updated in place.
const EXTENT_FLAGS_OFFSET: u64 = 16;
const EXTENT_NEXT_OFFSET: u64 = 20;
const EXTENT_PREV_OFFSET: u64 = 24;
const EXTENT_START_BLOCK_OFFSET: u64 = 28;
const EXTENT_LENGTH_OFFSET: u64 = 32;
const PINODE_SIZE_OFFSET: u64 = 32;
const PINODE_MTIME_OFFSET: u64 = 48;
const PINODE_CTIME_OFFSET: u64 = 56;
const PINODE_EXTENT_HEAD_OFFSET: u64 = 72;
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
    apply_moves(image, c.moves);
    apply_links(image, &header, &entries, Some(c.new));
    apply_retire(image, &entries);
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
fn data_range(image: &Image, e: &Extent) -> Option<(u64, u64)> {
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
fn new_record(image: &Image, entries: &[FileEntry], i: usize, fresh: Fresh<'_>) -> Extent {
    match fresh {
        Some(records) => {
            debug_assert_eq!(records[i].0, entries[i].new);
            records[i].1.clone()
        }
        None => image.extent(u64::from(entries[i].new)),
    }
}

/// The new extent records of a commit in hand, in entry order; `None` at recovery.
type Fresh<'a> = Option<&'a [(u32, Extent)]>;

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

/// A move's extent record after the commit (`new`) or before it, if the extent is in the table
/// and that side's length is one an extent may have (media content).
fn moved_record(image: &Image, m: &FileMove, new: bool) -> Option<Extent> {
    let eno = u64::from(m.eno);
    if eno == 0 || eno >= image.geometry().extent_count() {
        return None;
    }
    let mut record = image.extent(eno);
    let (start, length) = if new {
        (m.new_start, m.new_length)
    } else {
        (m.old_start, m.old_length)
    };
    let blocks = Extent::blocks_needed(u64::from(record.block_offset.get()), u64::from(length));
    if length == 0 || blocks > crate::format::extent::MAX_BLOCKS {
        return None;
    }
    record.start_block = U32::new(start);
    record.length = U32::new(length);
    record.block_count = U16::new(blocks as u16);
    Some(record)
}

/// The data-zone byte ranges a move's extent holds after the commit and before it, if both lie
/// inside the data zone (media content).
fn moved_ranges(image: &Image, m: &FileMove) -> Option<((u64, u64), (u64, u64))> {
    let new = data_range(image, &moved_record(image, m, true)?)?;
    let old = data_range(image, &moved_record(image, m, false)?)?;
    Some((new, old))
}

/// The block runs `(start, count)` of a validated move's extent after the commit and before it.
pub fn move_runs(image: &Image, m: &FileMove) -> [(u64, u64); 2] {
    [move_run(image, m, true), move_run(image, m, false)]
}

/// The block run `(start, count)` of a move's extent after the commit (`new`) or before it (a
/// validated move).
fn move_run(image: &Image, m: &FileMove, new: bool) -> (u64, u64) {
    let r = moved_record(image, m, new).expect("a validated move");
    (
        u64::from(r.start_block.get()),
        u64::from(r.block_count.get()),
    )
}

/// The parts of `[addr, addr + len)` outside every range of `sorted` (sorted by start).
pub(super) fn subtract(addr: u64, len: u64, sorted: &[(u64, u64)]) -> SmallVec<[(u64, u64); 2]> {
    let mut out = SmallVec::new();
    let (mut at, end) = (addr, addr + len);
    for &(a, l) in sorted {
        if a + l <= at {
            continue;
        }
        if a >= end {
            break;
        }
        if a > at {
            out.push((at, a - at));
        }
        at = at.max(a + l);
        if at >= end {
            break;
        }
    }
    if at < end {
        out.push((at, end - at));
    }
    out
}

/// The block runs `[start, start + count)` of the extents on one side of the entries (old or
/// new), sorted, for subtracting one side's blocks from the other's.
fn block_runs(
    image: &Image,
    entries: &[FileEntry],
    old: bool,
    fresh: Fresh<'_>,
) -> SmallVec<[(u64, u64); 8]> {
    let g = image.geometry();
    let mut runs: SmallVec<[(u64, u64); 8]> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i, if old { e.old } else { e.new }))
        .filter(|&(_, eno)| eno != 0 && u64::from(eno) < g.extent_count())
        .map(|(i, eno)| {
            let x = if old {
                image.extent(u64::from(eno))
            } else {
                new_record(image, entries, i, fresh)
            };
            (
                u64::from(x.start_block.get()),
                u64::from(x.block_count.get()),
            )
        })
        .collect();
    runs.sort_unstable();
    runs
}

fn store_u32_if(image: &Image, offset: u64, value: u32) {
    let region = image.region();
    let current: U32 = region.read(offset);
    if current.get() != value {
        region.write(offset, &U32::new(value));
        region.flush(offset, 4);
    }
}

/// The bitmap runs an apply step changes ([`BitmapChanges::plan_links`],
/// [`BitmapChanges::plan_retire`]), updated together ([`BitmapChanges::update`]) and flushed
/// together ([`BitmapChanges::flush`]); the caller fences.
#[derive(Debug, Default)]
pub struct BitmapChanges {
    /// `(first block, count, set)`.
    runs: smallvec::SmallVec<[(u64, u64, bool); 4]>,
}

impl BitmapChanges {
    /// The blocks the new extents gain: only those of a new extent that no removed extent
    /// covers, since the others are set already (the removed extents were committed) and stay
    /// set ([`BitmapChanges::plan_retire`] never clears a block a new extent holds). So an
    /// append merged into a long extent costs O(1), not O(file).
    /// A move's new run is all fresh blocks, set whole.
    pub fn plan_links(
        &mut self,
        image: &Image,
        entries: &[FileEntry],
        moves: &[FileMove],
        fresh: Fresh<'_>,
    ) {
        let mut old_runs = block_runs(image, entries, true, None);
        if !moves.is_empty() {
            old_runs.extend(moves.iter().map(|m| move_run(image, m, false)));
            old_runs.sort_unstable();
        }
        for (i, _) in entries.iter().enumerate().filter(|(_, e)| e.new != 0) {
            let record = new_record(image, entries, i, fresh);
            let start = u64::from(record.start_block.get());
            let count = u64::from(record.block_count.get());
            for (first, n) in subtract(start, count, &old_runs) {
                self.runs.push((first, n, true));
            }
        }
        for m in moves {
            let (start, count) = move_run(image, m, true);
            for (first, n) in subtract(start, count, &old_runs) {
                self.runs.push((first, n, true));
            }
        }
    }

    /// The blocks of the removed extents that `still_used` says no extent of the file holds any
    /// more; blocks a new extent covers are kept without asking it.
    /// A move's old run is retired the same way.
    pub fn plan_retire(
        &mut self,
        image: &Image,
        entries: &[FileEntry],
        moves: &[FileMove],
        fresh: Fresh<'_>,
        still_used: &dyn Fn(u64) -> bool,
    ) {
        let mut new_runs = block_runs(image, entries, false, fresh);
        if !moves.is_empty() {
            new_runs.extend(moves.iter().map(|m| move_run(image, m, true)));
            new_runs.sort_unstable();
        }
        let old_runs = entries
            .iter()
            .filter(|e| e.old != 0)
            .map(|e| {
                let record = image.extent(u64::from(e.old));
                (
                    u64::from(record.start_block.get()),
                    u64::from(record.block_count.get()),
                )
            })
            .chain(moves.iter().map(|m| move_run(image, m, false)));
        for (start, count) in old_runs {
            for (first, n) in subtract(start, count, &new_runs) {
                self.retire_unused(first, first + n, still_used);
            }
        }
    }

    /// Plans clearing the blocks of `[first, end)` that `still_used` does not claim.
    fn retire_unused(&mut self, first: u64, end: u64, still_used: &dyn Fn(u64) -> bool) {
        let mut block = first;
        while block < end {
            if still_used(block) {
                block += 1;
                continue;
            }
            let run_start = block;
            while block < end && !still_used(block) {
                block += 1;
            }
            self.runs.push((run_start, block - run_start, false));
        }
    }

    /// The bitmap words' atomic updates, unflushed.
    pub fn update(&self, image: &Image) {
        for &(first, n, set) in &self.runs {
            update_bitmap_bits(image, first, n, set);
        }
    }

    /// Flushes the words [`BitmapChanges::update`] changed.
    pub fn flush(&self, image: &Image) {
        for &(first, n, _) in &self.runs {
            flush_bitmap_bits(image, first, n);
        }
    }
}

/// First half of the apply step's records: validates the new extents, links each one's
/// neighbours to it, points the pinode at the list's head, ends the list at `last`, and stores
/// size and times. Idempotent; flushes what it stores; the caller fences. (The bitmap:
/// [`BitmapChanges`].)
pub fn apply_links(image: &Image, header: &FileLog, entries: &[FileEntry], fresh: Fresh<'_>) {
    let g = image.geometry();
    for (i, e) in entries.iter().enumerate().filter(|(_, e)| e.new != 0) {
        let eno = u64::from(e.new);
        let record = new_record(image, entries, i, fresh);
        let base = g.extent_offset(eno);
        store_u32_if(
            image,
            base + EXTENT_FLAGS_OFFSET,
            record.flags.get() | EXTENT_VALID,
        );
        let (prev, next) = (u64::from(record.prev.get()), u64::from(record.next.get()));
        if prev != 0 {
            store_u32_if(image, g.extent_offset(prev) + EXTENT_NEXT_OFFSET, e.new);
        }
        if next != 0 {
            store_u32_if(image, g.extent_offset(next) + EXTENT_PREV_OFFSET, e.new);
        }
    }
    let (head, last) = (header.head.get(), header.last.get());
    if head != 0 {
        store_u32_if(
            image,
            g.extent_offset(u64::from(head)) + EXTENT_PREV_OFFSET,
            0,
        );
    }
    if last != 0 {
        store_u32_if(
            image,
            g.extent_offset(u64::from(last)) + EXTENT_NEXT_OFFSET,
            0,
        );
    }
    let p = g.pinode_offset(u64::from(header.slot.get()));
    store_u32_if(image, p + PINODE_EXTENT_HEAD_OFFSET, head);
    let region = image.region();
    region.store_u64(p + PINODE_SIZE_OFFSET, header.size.get());
    let mtime_ns = header.mtime_ns.get();
    // The change time never goes back: an attribute change after the last write keeps its own.
    let ctime_ns = (region.load_u64(p + PINODE_CTIME_OFFSET) as i64).max(mtime_ns);
    region.store_u64(p + PINODE_MTIME_OFFSET, mtime_ns as u64);
    region.store_u64(p + PINODE_CTIME_OFFSET, ctime_ns as u64);
    region.flush(p + PINODE_SIZE_OFFSET, 32);
}

/// The apply step's moves: points each moved extent at its new run. Idempotent; flushes; the
/// caller fences. (Their blocks' bits: [`BitmapChanges`].)
pub fn apply_moves(image: &Image, moves: &[FileMove]) {
    let g = image.geometry();
    let region = image.region();
    for m in moves {
        let base = g.extent_offset(u64::from(m.eno));
        let record = moved_record(image, m, true).expect("a validated move");
        // `length`, `block_offset` and `block_count` are one aligned 8-byte word.
        let sized = record.as_bytes()[EXTENT_LENGTH_OFFSET as usize..][..8]
            .try_into()
            .expect("8 bytes");
        let start_same = region.read::<U32>(base + EXTENT_START_BLOCK_OFFSET).get() == m.new_start;
        let size_same = region.load_u64(base + EXTENT_LENGTH_OFFSET) == u64::from_le_bytes(sized);
        if start_same && size_same {
            continue; // applied before a crash
        }
        region.write(base + EXTENT_START_BLOCK_OFFSET, &U32::new(m.new_start));
        region.store_u64(base + EXTENT_LENGTH_OFFSET, u64::from_le_bytes(sized));
        region.flush(base + EXTENT_START_BLOCK_OFFSET, 12);
    }
}

/// Second half of the apply step's records: clears the valid bits of the removed extents.
/// Idempotent; flushes; the caller fences. (Their blocks' bits: [`BitmapChanges`].)
pub fn apply_retire(image: &Image, entries: &[FileEntry]) {
    let g = image.geometry();
    for e in entries.iter().filter(|e| e.old != 0) {
        let eno = u64::from(e.old);
        let record = image.extent(eno);
        store_u32_if(
            image,
            g.extent_offset(eno) + EXTENT_FLAGS_OFFSET,
            record.flags.get() & !EXTENT_VALID,
        );
    }
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

#[cfg(test)]
mod tests {
    use super::subtract;

    #[test]
    fn subtract_leaves_what_no_range_covers() {
        assert_eq!(subtract(0, 100, &[]).as_slice(), &[(0, 100)]);
        assert_eq!(subtract(0, 100, &[(0, 100)]).as_slice(), &[]);
        assert_eq!(
            subtract(0, 100, &[(20, 10)]).as_slice(),
            &[(0, 20), (30, 70)]
        );
        assert_eq!(
            subtract(50, 100, &[(0, 60), (140, 100)]).as_slice(),
            &[(60, 80)]
        );
        assert_eq!(subtract(10, 5, &[(100, 5)]).as_slice(), &[(10, 5)]);
    }
}
