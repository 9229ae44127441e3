//! The file journal's apply step ([`super::journal`]): the stores a committed log stands for,
//! shared by the commit that wrote it and by recovery, idempotent, so a crash at any point (also
//! during recovery) is repaired by applying the log again. New extents are validated and linked
//! to their neighbours ([`apply_links`]), moved extents get their new run and length
//! ([`apply_moves`]), retired extents lose their valid bit ([`apply_retire`]), and the bitmap
//! words the commit changes are planned, updated and flushed together ([`BitmapChanges`]).
//! Every function flushes what it stores; the caller fences.

use smallvec::SmallVec;
use zerocopy::little_endian::{U16, U32};
use zerocopy::IntoBytes;

use crate::format::extent::{Extent, FLAG_VALID as EXTENT_VALID};
use crate::format::journal::{FileEntry, FileLog, FileMove};
use crate::image::Image;
use crate::journal::{flush_bitmap_bits, update_bitmap_bits};

use super::journal::{data_range, new_record, Fresh};

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
pub(super) fn moved_ranges(image: &Image, m: &FileMove) -> Option<((u64, u64), (u64, u64))> {
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
    // A link field of a new extent whose record is in hand already holds what it says: no
    // read-back of a line this commit just wrote back (that waits for memory where a write-back
    // evicts). At recovery (`fresh` None) every field is read.
    let written = |eno: u64| -> Option<Extent> {
        fresh?;
        let i = entries.iter().position(|e| u64::from(e.new) == eno)?;
        Some(new_record(image, entries, i, fresh))
    };
    let link = |eno: u64, field: u64, value: u32| {
        debug_assert!(field == EXTENT_NEXT_OFFSET || field == EXTENT_PREV_OFFSET);
        let in_hand = written(eno).map(|r| {
            if field == EXTENT_NEXT_OFFSET {
                r.next.get()
            } else {
                r.prev.get()
            }
        });
        if in_hand != Some(value) {
            store_u32_if(image, g.extent_offset(eno) + field, value);
        }
    };
    for (i, e) in entries.iter().enumerate().filter(|(_, e)| e.new != 0) {
        let eno = u64::from(e.new);
        let record = new_record(image, entries, i, fresh);
        let flags_at = g.extent_offset(eno) + EXTENT_FLAGS_OFFSET;
        let flags = record.flags.get() | EXTENT_VALID;
        if fresh.is_some() {
            // Written without the valid bit by this commit (its step 1): set it unread.
            image.region().write(flags_at, &U32::new(flags));
            image.region().flush(flags_at, 4);
        } else {
            store_u32_if(image, flags_at, flags);
        }
        let (prev, next) = (u64::from(record.prev.get()), u64::from(record.next.get()));
        if prev != 0 {
            link(prev, EXTENT_NEXT_OFFSET, e.new);
        }
        if next != 0 {
            link(next, EXTENT_PREV_OFFSET, e.new);
        }
    }
    let (head, last) = (header.head.get(), header.last.get());
    if head != 0 {
        link(u64::from(head), EXTENT_PREV_OFFSET, 0);
    }
    if last != 0 {
        link(u64::from(last), EXTENT_NEXT_OFFSET, 0);
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

/// The apply step's moves: points each moved extent at its new run. Idempotent; unflushed
/// ([`flush_moves`]); the caller fences. (Their blocks' bits: [`BitmapChanges`].)
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
    }
}

/// Flushes what [`apply_moves`] stored (every move's, applied before a crash or now).
pub fn flush_moves(image: &Image, moves: &[FileMove]) {
    let g = image.geometry();
    for m in moves {
        let base = g.extent_offset(u64::from(m.eno));
        image.region().flush(base + EXTENT_START_BLOCK_OFFSET, 12);
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
