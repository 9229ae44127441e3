//! The DRAM side of a file commit: pending pieces joined with the neighbours they continue,
//! crowded windows rewritten (the fragmentation policy), extent numbers and records, the
//! journal transaction ([`super::journal::commit`]) and the bookkeeping once it is durable.

use smallvec::SmallVec;
use zerocopy::little_endian::{U16, U32, U64};

use crate::error::{Errno, Result};
use crate::format::extent::Extent;
use crate::format::journal::FileMove;
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::journal::fault;
use crate::settle::{Journal, Limbo};

use super::filemap::Piece;
use super::journal::{self, FileCommit};
use super::{crowding, fits_one_extent, FileState, CHECKSUM_DATA_MAX_BYTES, WINDOW_BYTES};

impl Fs {
    /// Commits the file's pending state (the caller holds its inode lock and file lock).
    pub(super) fn commit_file(&self, inode: &Inode, state: &mut FileState) -> Result<()> {
        if !state.is_dirty() {
            return Ok(());
        }
        // Window rewrites may put new bytes where the last write's were.
        state.recent_write = None;
        // Pages rewritten in place (`FileMap::replace`) add no piece: no window can have become
        // crowded since the last commit, which dealt with the ones that were.
        let pieces_added = state.map.inserted();
        self.merge_pending(state);
        self.install_prepared(state);
        if pieces_added && self.compaction_deferred() {
            self.queue_crowded(inode.ino, state);
        } else if pieces_added {
            self.defragment(state);
        }
        if std::mem::take(&mut state.punched) {
            self.relink_around_removed(state);
        }
        let numbered = self.number_pending(state)?;
        let (offsets, moved) = (&numbered.offsets, &numbered.moved);
        let new = self.extent_records(inode.ino, state, offsets);
        let removed: SmallVec<[u32; 8]> = state.removed.iter().map(|r| r.0).collect();
        let moves: SmallVec<[FileMove; 4]> = moved.iter().map(Moved::entry).collect();
        let eno_at = |p: Option<(u64, Piece)>| p.map_or(0, |(_, p)| p.eno);
        let c = FileCommit {
            ino: inode.ino,
            slot: inode.primary_slot(),
            size: state.size,
            mtime_ns: state.mtime_ns,
            head: eno_at(state.map.iter().next()),
            last: eno_at(state.map.last()),
            new: &new,
            removed: &removed,
            moves: &moves,
            data_fenced: state.dirty_bytes > CHECKSUM_DATA_MAX_BYTES,
        };
        let Some(overflow) = self.alloc_overflow(c.overflow_blocks_needed()) else {
            self.unnumber_pending(state, &numbered);
            return Err(Errno::ENOSPC.into());
        };
        // Blocks of the retired extents that no new extent covers: no piece covers them whole
        // (they held retired bytes), so the counts tell whether one still uses them.
        let mark = self.commit_through_log(state.last_commit, &overflow, &c, &|b| {
            state.map.refs().touched(b)
        });
        state.last_commit = mark;
        state.map.take_inserted();
        for m in moved {
            state.committed_refs.remove(m.old_addr, m.old_len);
            state.committed_refs.add(m.new_addr, m.new_len);
        }
        self.after_commit(state, &new, &overflow);
        self.debug_check_list(inode, state);
        Ok(())
    }

    /// Gives each pending piece the extent it commits as: the extent it moves ([`Fs::find_moves`])
    /// or a new one. Returns the offsets of the pieces given new extents, those extents, and the
    /// moves. ENOSPC changes nothing.
    fn number_pending(&self, state: &mut FileState) -> Result<Numbered> {
        let mut offsets = state.map.pending();
        let moved = if self.image.geometry().moves {
            self.find_moves(state, &offsets)
        } else {
            SmallVec::new()
        };
        offsets.retain(|o| !moved.iter().any(|m| m.offset == *o));
        let enos = self.alloc_extents(offsets.len())?;
        for m in &moved {
            state.map.set_eno(m.offset, m.eno);
        }
        state
            .removed
            .retain(|r| !moved.iter().any(|m| m.eno == r.0));
        for (&offset, &eno) in offsets.iter().zip(&enos) {
            state.map.set_eno(offset, eno);
        }
        Ok(Numbered {
            offsets,
            enos,
            moved,
        })
    }

    /// Undoes [`Fs::number_pending`] (a commit that could not get its overflow blocks).
    fn unnumber_pending(&self, state: &mut FileState, numbered: &Numbered) {
        let Numbered {
            offsets,
            enos,
            moved,
        } = numbered;
        offsets.iter().for_each(|&o| state.map.set_eno(o, 0));
        enos.iter().for_each(|&e| self.extents.free(e));
        for m in moved {
            state.map.set_eno(m.offset, 0);
            state.removed.push((m.eno, m.old_addr, m.old_len));
        }
    }

    /// The pending pieces at `offsets` (sorted) that can commit as moves: each replaces exactly
    /// one removed extent (same file offset, length and offset in its first block, so the same
    /// block count) with new bytes elsewhere, and the extent's links on the media already name
    /// the neighbours it has after the commit, or neighbours that are new in it (whose apply step
    /// links it). The extent then stays where it is in the list and only its `start_block`
    /// changes: no new record, no links, no extent freed. Nothing is changed here.
    pub(super) fn find_moves(&self, state: &FileState, offsets: &[u64]) -> SmallVec<[Moved; 4]> {
        let mut moved: SmallVec<[Moved; 4]> = SmallVec::new();
        if state.removed.is_empty() || state.removed.len() > MOVE_CANDIDATES_MAX {
            return moved; // (such commits rewrite many pieces: not page writes)
        }
        // A removed extent is a candidate when a pending piece starts where it started: a read of
        // its record and a search of the sorted offsets each, before any lookup in the map.
        let mut candidates: SmallVec<[Candidate; 4]> = state
            .removed
            .iter()
            .map(|&(eno, addr, len)| (eno, addr, len, self.image.extent(u64::from(eno))))
            .filter(|(.., record)| offsets.binary_search(&record.file_offset.get()).is_ok())
            .map(|(eno, addr, len, record)| (record.file_offset.get(), eno, addr, len, record))
            .collect();
        candidates.sort_unstable_by_key(|c| c.0);
        for (offset, eno, old_addr, len, record) in candidates {
            let piece = state.map.get(offset).expect("a pending piece");
            // The same offset in its first block (the record's `block_offset` stays), and some
            // change: a rewrite elsewhere, a growth in place (an append joined to it), a cut.
            let fits = old_addr % BLOCK_SIZE == piece.addr % BLOCK_SIZE
                && (old_addr != piece.addr || len != piece.len);
            if fits && self.links_hold(state, &moved, offset, &record) {
                moved.push(Moved {
                    offset,
                    eno,
                    old_addr,
                    new_addr: piece.addr,
                    old_len: len,
                    new_len: piece.len,
                });
            }
        }
        moved
    }

    /// Whether extent `record`, moved at file offset `offset`, keeps valid links after the commit
    /// without any store of its own: each neighbour in the map is new in this commit, or is the
    /// extent the record already names on that side. The pending piece after it is decided later
    /// (in offset order), by the same test from its side.
    fn links_hold(&self, state: &FileState, moved: &[Moved], offset: u64, record: &Extent) -> bool {
        let holds = |neighbour: Option<(u64, Piece)>, named: u32| match neighbour {
            None => true, // the list's end: the apply step stores it
            Some((at, p)) if p.eno == 0 => !moved.iter().any(|m| m.offset == at && m.eno != named),
            Some((_, p)) => p.eno == named,
        };
        holds(state.map.before(offset), record.prev.get())
            && match state.map.after(offset) {
                Some((_, p)) if p.eno == 0 => true,
                after => holds(after, record.next.get()),
            }
    }

    /// Debug builds: the media's extent list of a small file is exactly its map, in order.
    pub(super) fn debug_check_list(&self, inode: &Inode, state: &FileState) {
        if !cfg!(debug_assertions) || state.map.len() > 256 {
            return;
        }
        let mut on_media = Vec::with_capacity(state.map.len());
        let mut eno = self
            .image
            .pinode(u64::from(inode.primary_slot()))
            .extent_head
            .get();
        let mut prev = 0;
        while eno != 0 && on_media.len() <= state.map.len() {
            let e = self.image.extent(u64::from(eno));
            assert_eq!(
                e.prev.get(),
                prev,
                "extent {eno} links back to the wrong extent"
            );
            on_media.push((e.file_offset.get(), eno));
            (prev, eno) = (eno, e.next.get());
        }
        let in_map: Vec<(u64, u32)> = state.map.iter().map(|(o, p)| (o, p.eno)).collect();
        assert_eq!(
            on_media, in_map,
            "inode {}: the media list is not the map",
            inode.ino
        );
    }

    /// The apply step relinks only the neighbours of new extents and the ends of the list. A
    /// removed extent whose media predecessor stays committed while the piece now after that
    /// predecessor is committed too (a punch dropping whole pieces between two kept ones, or an
    /// overwrite whose new piece was punched away before the commit) would leave the
    /// predecessor's `next` naming a retired extent: that predecessor is committed again as a new
    /// extent over the same bytes, whose apply step links both its sides. O(removed extents),
    /// each a read of two records; run by commits after a punch (`FileState::punched`).
    pub(super) fn relink_around_removed(&self, state: &mut FileState) {
        for i in 0..state.removed.len() {
            let prev = self.image.extent(u64::from(state.removed[i].0)).prev.get();
            if prev == 0 {
                // It was the head: the piece now first is the head (or new, or after a new one).
                continue;
            }
            let offset = self.image.extent(u64::from(prev)).file_offset.get();
            let kept = state.map.get(offset).is_some_and(|p| p.eno == prev);
            let next_committed = state.map.after(offset).is_some_and(|(_, p)| p.eno != 0);
            if kept && next_committed {
                state.map.reissue(offset, &mut state.removed);
            }
        }
    }

    /// DRAM bookkeeping once a commit is durable: the committed counts follow the map, and blocks
    /// set aside for this commit, extents that left the map and the commit's `overflow` blocks
    /// are freed (held by the log while its record may be replayed).
    pub(super) fn after_commit(
        &self,
        state: &mut FileState,
        new: &[(u32, Extent)],
        overflow: &[u64],
    ) {
        // `removed` and `deferred` are emptied, not replaced: they keep their room for the next
        // commit's writes, which would otherwise allocate it again.
        for &(_, addr, len) in &state.removed {
            state.committed_refs.remove(addr, len);
        }
        for (_, e) in new {
            let addr =
                u64::from(e.start_block.get()) * BLOCK_SIZE + u64::from(e.block_offset.get());
            state.committed_refs.add(addr, u64::from(e.length.get()));
        }
        // Only blocks that lost bytes can be free now, so this stays O(change), not O(file): an
        // append merged into a long extent retires it whole, yet frees nothing.
        let tail = state.tail_block();
        let mut blocks: SmallVec<[u64; 8]> = state
            .deferred
            .iter()
            .copied()
            .filter(|&b| !state.map.refs().touched(b) && tail != Some(b))
            .collect();
        blocks.extend_from_slice(overflow);
        let extents: SmallVec<[u32; 4]> = state.removed.iter().map(|r| r.0).collect();
        state.deferred.clear();
        state.removed.clear();
        self.hold_for_commit(state.last_commit, extents.into_iter(), blocks);
        state.committed_size = state.size;
        state.committed_mtime_ns = state.mtime_ns;
        state.dirty_bytes = 0;
        debug_assert!(!state.is_dirty());
        debug_assert_eq!(state.committed_refs, *state.map.refs());
    }

    pub(super) fn alloc_extents(&self, count: usize) -> Result<SmallVec<[u32; 8]>> {
        let mut enos = SmallVec::with_capacity(count);
        for _ in 0..count {
            match self.alloc_or_settle(|| self.extents.alloc(&self.image)) {
                Some(eno) => enos.push(eno),
                None => {
                    enos.iter().for_each(|&e| self.extents.free(e));
                    return Err(Errno::ENOSPC.into());
                }
            }
        }
        Ok(enos)
    }

    pub(super) fn alloc_overflow(&self, count: usize) -> Option<Vec<u64>> {
        let mut blocks = Vec::with_capacity(count);
        for _ in 0..count {
            match self.alloc_or_settle(|| self.blocks.alloc(1)) {
                Some(b) => blocks.push(b),
                None => {
                    blocks.iter().for_each(|&b| self.blocks.free(b, 1));
                    return None;
                }
            }
        }
        Some(blocks)
    }

    /// Commits `c` through a free file log, which it leaves unsettled ([`crate::settle`]): the
    /// log of the file's last commit (`last_commit`, its mark), if another and still unsettled,
    /// is settled first, so it can never be replayed over this one. Returns this commit's mark,
    /// for [`Fs::hold_for_commit`] to hold what it freed by.
    pub(super) fn commit_through_log(
        &self,
        last_commit: u64,
        overflow: &[u64],
        c: &FileCommit<'_>,
        still_used: &dyn Fn(u64) -> bool,
    ) -> u64 {
        let log = self.take_file_log();
        let this_log = self.settler.index(Journal::File, log);
        let marked = self
            .settler
            .unsettled_log_of(last_commit)
            .filter(|&index| index != this_log);
        if let Some(index) = marked.filter(|_| !fault::active(fault::Fault::SkipSettle)) {
            let released = self.settler.settle(&self.image, &[index]);
            self.return_to_pools(&released);
        }
        journal::commit(&self.image, log, overflow, c, still_used);
        let mark = self.settler.cleared_lazily(Journal::File, log);
        self.file_logs.free(log as u32);
        mark
    }

    /// Holds the extents and blocks the file commit named `mark` freed while its record may be
    /// replayed, and gives back what its log held for the record before ([`crate::settle`],
    /// rule 2).
    pub(super) fn hold_for_commit(
        &self,
        mark: u64,
        extents: impl Iterator<Item = u32>,
        blocks: SmallVec<[u64; 8]>,
    ) {
        let frees = Limbo {
            extents: extents.collect(),
            blocks: super::place::runs_of(blocks),
            ..Limbo::default()
        };
        if fault::active(fault::Fault::SkipLimbo) {
            self.return_to_pools(&frees);
            return;
        }
        let released = self.settler.hold_for_log(mark, frees);
        if !released.is_empty() {
            self.return_to_pools(&released);
        }
    }

    /// A free file log. There are far more logs than threads committing at once, so waiting for
    /// one is a formality.
    pub(super) fn take_file_log(&self) -> u64 {
        loop {
            if let Some(log) = self.file_logs.alloc(&self.image) {
                return u64::from(log);
            }
            std::thread::yield_now();
        }
    }

    /// The extent records of the pieces at `offsets` (numbers assigned), linked to their
    /// neighbours in the file, valid bit clear.
    pub(super) fn extent_records(
        &self,
        ino: u64,
        state: &FileState,
        offsets: &[u64],
    ) -> SmallVec<[(u32, Extent); 4]> {
        offsets
            .iter()
            .map(|&offset| {
                let p = state.map.get(offset).expect("a pending piece");
                let neighbour = |n: Option<(u64, Piece)>| n.map_or(0, |(_, q)| q.eno);
                let e = extent_record(
                    ino,
                    offset,
                    p.addr,
                    p.len,
                    neighbour(state.map.before(offset)),
                    neighbour(state.map.after(offset)),
                );
                (p.eno, e)
            })
            .collect()
    }

    /// Joins each pending piece with the pieces before and after it that it continues both in
    /// the file and in the data zone (appends, 1 KiB writes packed in a tail block). A piece
    /// that can commit as a move of the extent it rewrites is not joined into the committed
    /// piece before it: a log's frames rewritten one after another would otherwise grow the
    /// first frame's extent and cut the next one's at every commit, instead of moving each.
    pub(super) fn merge_pending(&self, state: &mut FileState) {
        let offsets = state.map.pending();
        for offset in offsets {
            let Some(piece) = state.map.get(offset) else {
                continue; // merged into an earlier one
            };
            let mut at = (offset, piece);
            while let Some(joined) = state
                .map
                .before(at.0)
                .filter(|q| {
                    !continues(*q, at) || q.1.eno == 0 || !self.rewrites_in_place(state, at)
                })
                .and_then(|q| join(state, q, at))
            {
                at = joined;
            }
            while let Some(joined) = state.map.after(at.0).and_then(|r| join(state, at, r)) {
                at = joined;
            }
        }
    }

    /// Whether pending piece `(offset, piece)` starts where an extent it replaces started, at the
    /// same offset in its block: what [`Fs::find_moves`] moves.
    fn rewrites_in_place(&self, state: &FileState, (offset, piece): (u64, Piece)) -> bool {
        state.removed.len() <= MOVE_CANDIDATES_MAX
            && state.removed.iter().any(|&(eno, addr, _)| {
                addr % BLOCK_SIZE == piece.addr % BLOCK_SIZE
                    && self.image.extent(u64::from(eno)).file_offset.get() == offset
            })
    }

    /// The fragmentation policy: any 64 KiB window with a pending piece and more than 32 pieces is
    /// rewritten into fresh contiguous space as one piece. Skipped quietly when space is short.
    pub(super) fn defragment(&self, state: &mut FileState) {
        let mut windows: SmallVec<[u64; 8]> = state
            .map
            .pending()
            .iter()
            .map(|offset| offset / WINDOW_BYTES)
            .collect();
        windows.dedup();
        for window in windows {
            if crowding::crowded(state, window) && !self.defragment_window(state, window) {
                return;
            }
        }
    }

    /// Rewrites one window's pieces as one pending piece: into the run most of it lies in when
    /// that may take it (`inplace`), else into fresh contiguous space; false when space is short
    /// (nothing changed).
    pub(super) fn defragment_window(&self, state: &mut FileState, window: u64) -> bool {
        let Some((from, to)) = window_span(state, window) else {
            return true; // nothing to rewrite
        };
        if self.rewrite_window_in_place(state, from, to) {
            return true;
        }
        thread_local! {
            /// The window's bytes on their way to the new blocks. Kept: a fresh zeroed 64 KiB
            /// vector costs a memset per rewrite, and `read_locked` writes every byte anyway
            /// (holes as zeros).
            static WINDOW: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let placed = WINDOW.with_borrow_mut(|bytes| {
            bytes.resize(WINDOW_BYTES as usize, 0);
            let bytes = &mut bytes[..(to - from) as usize];
            let read = self.read_locked(state, from, bytes);
            assert_eq!(read, bytes.len(), "a window's span ends within the file");
            let placement = self.place(state, from, to - from, 0, true, None).ok()?;
            self.store_data(&placement, bytes);
            Some(placement)
        });
        let Some(placement) = placed else {
            return false;
        };
        self.put_pieces(state, from, &placement);
        state.dirty_bytes += to - from;
        true
    }
}

/// A removed extent that may move: (file offset, eno, data-zone address, length, record).
type Candidate = (u64, u32, u64, u64, Extent);

/// Most removed extents a commit looks at for moves.
const MOVE_CANDIDATES_MAX: usize = 64;

/// What [`Fs::number_pending`] gave the pending pieces: the offsets of those given new extents,
/// those extents in the same order, and the moves.
pub(super) struct Numbered {
    offsets: SmallVec<[u64; 8]>,
    enos: SmallVec<[u32; 8]>,
    moved: SmallVec<[Moved; 4]>,
}

/// A pending piece committing as a move of the extent it replaces ([`Fs::find_moves`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Moved {
    offset: u64,
    eno: u32,
    old_addr: u64,
    new_addr: u64,
    old_len: u64,
    new_len: u64,
}

impl Moved {
    fn entry(&self) -> FileMove {
        FileMove {
            eno: self.eno,
            old_start: (self.old_addr / BLOCK_SIZE) as u32,
            new_start: (self.new_addr / BLOCK_SIZE) as u32,
            old_length: self.old_len as u32,
            new_length: self.new_len as u32,
        }
    }
}

/// The span a window's rewrite takes: from its first piece's start to its last one's end,
/// within the window and the file's size; None when that leaves nothing.
pub(super) fn window_span(state: &FileState, window: u64) -> Option<(u64, u64)> {
    let (start, end) = (window * WINDOW_BYTES, (window + 1) * WINDOW_BYTES);
    let first = state.map.overlapping(start, end).next()?;
    let last = state.map.overlapping(start, end).last()?;
    let from = first.0.max(start);
    let to = (last.0 + last.1.len).min(end).min(state.size);
    (from < to).then_some((from, to))
}

/// The extent record of `len` bytes at file offset `offset`, data-zone address `addr`, between
/// extents `prev` and `next` (0: none), valid bit clear.
pub(super) fn extent_record(
    ino: u64,
    offset: u64,
    addr: u64,
    len: u64,
    prev: u32,
    next: u32,
) -> Extent {
    let block_offset = addr % BLOCK_SIZE;
    Extent {
        ino: U64::new(ino),
        file_offset: U64::new(offset),
        flags: U32::new(0),
        next: U32::new(next),
        prev: U32::new(prev),
        start_block: U32::new((addr / BLOCK_SIZE) as u32),
        length: U32::new(len as u32),
        block_offset: U16::new(block_offset as u16),
        block_count: U16::new(Extent::blocks_needed(block_offset, len) as u16),
    }
}

/// Whether `right` continues `left` both in the file and in the data zone.
fn continues((left_offset, left): (u64, Piece), (right_offset, right): (u64, Piece)) -> bool {
    left_offset + left.len == right_offset && left.addr_end() == right.addr
}

/// Replaces two neighbouring pieces by one pending piece if `right` continues `left` both in the
/// file and in the data zone and the result fits one extent; a committed side's extent is retired
/// at the commit. Returns the joined piece.
pub(super) fn join(
    state: &mut FileState,
    (left_offset, left): (u64, Piece),
    (right_offset, right): (u64, Piece),
) -> Option<(u64, Piece)> {
    if !continues((left_offset, left), (right_offset, right))
        || !fits_one_extent(left.addr, left.len + right.len)
    {
        return None;
    }
    for (offset, piece) in [(left_offset, left), (right_offset, right)] {
        state.map.remove(offset);
        if piece.eno != 0 {
            state.removed.push((piece.eno, piece.addr, piece.len));
        }
    }
    let joined = Piece {
        addr: left.addr,
        len: left.len + right.len,
        eno: 0,
        fresh: left.fresh && right.fresh,
    };
    state.map.insert(left_offset, joined);
    Some((left_offset, joined))
}
