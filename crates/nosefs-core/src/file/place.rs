//! Where a write's bytes go: the tail block, a continuation of the file's last run, or whole
//! blocks ([`Fs::place`]); storing them ([`Fs::store_data`]); and the file's DRAM map and block
//! counts after the write, freeing what no piece holds any more ([`Fs::put_pieces`]). See the
//! parent module for the policy.

use smallvec::SmallVec;

use crate::error::{Errno, Result};
use crate::format::extent;
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::journal::fault;
use crate::settle::Limbo;

use super::filemap::{Piece, Punched};
use super::{fits_one_extent, FileState, Placement, NT_COPY_MIN_BYTES};

impl Fs {
    /// A write's bytes placed ([`Fs::rejoin_placement`], else [`Fs::place`]), stored, and put
    /// in the map; a short one's also kept in DRAM ([`FileState::recent_write`]).
    pub(super) fn place_and_store(
        &self,
        state: &mut FileState,
        offset: u64,
        data: &[u8],
        promise_cap: u64,
        overwrite: bool,
    ) -> Result<()> {
        let len = data.len() as u64;
        let rejoined = self.rejoin_placement(state, offset, len, promise_cap, overwrite)?;
        let placed_alone = rejoined.is_none();
        let (from, placement) = match rejoined {
            Some(Rejoined { from, placement }) => (from, placement),
            None => {
                let align = overwrite
                    .then(|| Fs::move_alignment(state, offset, len))
                    .flatten();
                let placement = self.place(state, offset, len, promise_cap, overwrite, align)?;
                (offset, placement)
            }
        };
        // A rejoined write's earlier bytes go again before its own: one run, one piece.
        let mut earlier = [0u8; REJOIN_MAX_BYTES as usize];
        let earlier = &mut earlier[..(offset - from) as usize];
        if !earlier.is_empty() {
            self.earlier_bytes(state, from, offset, earlier);
        }
        self.store_data_joined(&placement, earlier, data);
        self.put_pieces(state, from, &placement);
        state.recent_write = if placed_alone {
            RecentWrite::of(offset, &placement, data)
        } else {
            None
        };
        Ok(())
    }

    /// The bytes of the piece `[from, to)` (pending, at most [`REJOIN_MAX_BYTES`]): from DRAM
    /// when they are the last write's, else read back from the data zone.
    fn earlier_bytes(&self, state: &FileState, from: u64, to: u64, out: &mut [u8]) {
        let piece = state.map.get(from).expect("the piece to rejoin");
        debug_assert_eq!(piece.len, to - from);
        match state.recent_write {
            Some(r) if (r.offset, r.addr, r.len) == (from, piece.addr, out.len()) => {
                out.copy_from_slice(&r.bytes[..r.len]);
            }
            _ => {
                let base = self.image.geometry().block_offset(0);
                self.image.region().read_bytes(base + piece.addr, out);
            }
        }
    }

    /// Copies `data` to the ranges of `placement`, flushed (or non-temporal).
    pub(super) fn store_data(&self, placement: &Placement, data: &[u8]) {
        self.store_data_joined(placement, &[], data);
    }

    /// Copies `prefix` followed by `data` to the ranges of `placement`, flushed (or
    /// non-temporal, for at least [`NT_COPY_MIN_BYTES`] in all), without joining them in a
    /// buffer first: each range takes its bytes from the one or both it spans.
    pub(super) fn store_data_joined(&self, placement: &Placement, prefix: &[u8], data: &[u8]) {
        let nt = prefix.len() + data.len() >= NT_COPY_MIN_BYTES;
        let region = self.image.region();
        let base = self.image.geometry().block_offset(0);
        let mut done = 0usize;
        for &(addr, len) in placement {
            let (start, end) = (done, done + len as usize);
            let parts = [
                (
                    start.min(prefix.len()),
                    end.min(prefix.len()),
                    prefix,
                    0usize,
                ),
                (
                    start.max(prefix.len()),
                    end.max(prefix.len()),
                    data,
                    prefix.len(),
                ),
            ];
            for (from, to, source, source_start) in parts {
                if from == to {
                    continue;
                }
                let chunk = &source[from - source_start..to - source_start];
                let at = base + addr + (from - start) as u64;
                if nt {
                    region.copy_nt(at, chunk);
                } else {
                    region.write_bytes(at, chunk);
                    region.flush(at, chunk.len() as u64);
                }
            }
            done = end;
        }
        debug_assert_eq!(done, prefix.len() + data.len());
    }

    /// Replaces file bytes `[offset, ...)` by the pieces of `placement`, and frees what no piece
    /// holds any more.
    pub(super) fn put_pieces(&self, state: &mut FileState, offset: u64, placement: &Placement) {
        state.changed();
        if self.replace_piece(state, offset, placement) {
            return;
        }
        let len: u64 = placement.iter().map(|p| p.1).sum();
        let mut punched = Punched::default();
        state.map.punch(offset, offset + len, &mut punched);
        let mut at = offset;
        for &(addr, piece_len) in placement {
            let piece = Piece {
                addr,
                len: piece_len,
                eno: 0,
                fresh: true,
            };
            state.map.insert(at, piece);
            at += piece_len;
        }
        // As in `replace_piece`: the commit reads these records (a page write's few).
        for &(eno, ..) in punched.removed.iter().take(4) {
            self.image.prefetch_extent(u64::from(eno));
        }
        state.removed.extend(punched.removed);
        self.free_dropped(state, &punched.dropped);
    }

    /// A page write whose bytes exactly replace one piece (a page rewritten where it was) swaps
    /// it in the map in place: one lookup instead of a punch and an insert. Only whole pages
    /// try: a byte-granular write rarely replaces exactly one piece, and the failed lookup would
    /// cost it a search of the map. Whether it did.
    fn replace_piece(&self, state: &mut FileState, offset: u64, placement: &Placement) -> bool {
        let &[(addr, len)] = &placement[..] else {
            return false;
        };
        if offset % BLOCK_SIZE != 0 || len % BLOCK_SIZE != 0 {
            return false;
        }
        let piece = Piece {
            addr,
            len,
            eno: 0,
            fresh: true,
        };
        let Some(old) = state.map.replace(offset, piece) else {
            return false;
        };
        if old.eno != 0 {
            state.removed.push((old.eno, old.addr, old.len));
            // The commit reads the record to find the move (`Fs::find_moves`); a page rewritten
            // at random has it far from the cache, and the miss would sit inside the fsync.
            self.image.prefetch_extent(u64::from(old.eno));
        }
        self.free_dropped(state, &[(old.addr, old.len, old.fresh)]);
        true
    }

    /// Where in its first block a write at `offset` should put its bytes so that its commit
    /// can be a move ([`Fs::find_moves`]): the offset in its block of the committed piece that
    /// starts exactly there, if one does. A database rewriting a record where it wrote it
    /// (LMDB's meta page, 120 bytes at 32 and at 4,128; SQLite's log frames, 4,120 bytes each,
    /// once the log starts over) then commits by moving that record's extent, not by adding
    /// an extent, linking it and retiring the old one. `None` for whole pages, which new
    /// blocks start at offset 0 already, and where no committed piece starts at `offset`.
    pub(super) fn move_alignment(state: &FileState, offset: u64, len: u64) -> Option<u64> {
        if offset % BLOCK_SIZE == 0 && len % BLOCK_SIZE == 0 {
            return None;
        }
        let piece = state.map.get(offset)?;
        (piece.eno != 0).then_some(piece.addr % BLOCK_SIZE)
    }

    /// Space for `len` new bytes: the rest of the tail block when they fit there, else whole
    /// blocks, the unused end of the last one becoming the tail; up to `promise_cap` of them
    /// from the file's promise. An `overwrite` (bytes inside the file) continues after the
    /// file's last blocks only where that touches no fresh page of a lazily populated image
    /// ([`BlockAllocator::is_untouched`]); an append continues there always, so a growing file
    /// stays contiguous. With an `align`ment ([`Fs::move_alignment`]) the bytes start at that
    /// offset in their first block: the tail is used only where its next byte has that offset,
    /// else new blocks are taken and the bytes before it in the first are left unused. ENOSPC
    /// takes nothing.
    ///
    /// [`BlockAllocator::is_untouched`]: crate::alloc::BlockAllocator::is_untouched
    pub(super) fn place(
        &self,
        state: &mut FileState,
        offset: u64,
        len: u64,
        promise_cap: u64,
        overwrite: bool,
        align: Option<u64>,
    ) -> Result<Placement> {
        if let Some((next, end)) = state
            .tail
            .filter(|t| align.map_or(true, |a| t.0 % BLOCK_SIZE == a))
        {
            if len <= end - next {
                state.tail = (next + len < end).then_some((next + len, end));
                state.tail_continues_at = Some(offset + len);
                return Ok(smallvec::smallvec![(next, len)]);
            }
            if let Some(placement) = self.continue_tail(state, offset, len, promise_cap, overwrite)
            {
                return Ok(placement);
            }
        }
        // Bytes of the first new block left unused, so that the write starts at `align`.
        let mut skip = align.unwrap_or(0);
        let mut placement = Placement::new();
        let mut runs: SmallVec<[(u64, u64); 2]> = SmallVec::new();
        let mut need = len;
        // The part of the promise this write may spend, spent from a copy and settled at the end.
        let usable_before = state.promised.min(promise_cap);
        let mut usable = usable_before;
        while need > 0 {
            let want = (skip + need).div_ceil(BLOCK_SIZE).min(extent::MAX_BLOCKS);
            let goal = state
                .goal
                .filter(|&g| !(overwrite && self.blocks.is_untouched(g)));
            let got = if usable > 0 {
                let promised = std::cell::Cell::new(usable);
                let got = self.alloc_or_settle(|| {
                    let mut p = promised.get();
                    let got = self.blocks.alloc_upto_promised(goal, want, &mut p);
                    promised.set(p);
                    got
                });
                usable = promised.get();
                got
            } else {
                self.alloc_or_settle(|| self.blocks.alloc_upto(goal, want))
            };
            let Some((start, count)) = got else {
                runs.iter().for_each(|&(s, n)| self.blocks.free(s, n));
                // What this placement spent of the file's promise is the file's again, if the
                // blocks just freed are still unclaimed.
                let spent = usable_before - usable;
                if spent > 0 && !self.blocks.promise(spent) {
                    state.promised -= spent;
                }
                return Err(Errno::ENOSPC.into());
            };
            runs.push((start, count));
            state.goal = Some(start + count);
            let bytes = (count * BLOCK_SIZE - skip).min(need);
            placement.push((start * BLOCK_SIZE + skip, bytes));
            need -= bytes;
            skip = 0;
        }
        state.promised -= usable_before - usable;
        let (addr, bytes) = *placement.last().expect("len > 0");
        let end = (addr + bytes).next_multiple_of(BLOCK_SIZE);
        if end > addr + bytes {
            let old = state.tail_block();
            state.tail = Some((addr + bytes, end));
            state.tail_continues_at = Some(offset + len);
            // A tail block has bytes never written, so nothing covers it whole.
            if let Some(old) = old.filter(|&b| state.partial_block_unused(b)) {
                self.free_outside_commit(state, smallvec::smallvec![old]);
            }
        }
        Ok(placement)
    }

    /// Space for a write that continues a small write just placed at the end of the tail block
    /// (SQLite's log: a frame's 24-byte header, then its page), when the blocks after the tail
    /// block are taken, so that [`Fs::continue_tail`] cannot put the two in one run: then the
    /// earlier write's bytes are placed again, with this one's after them, at the earlier
    /// write's offset in its block (kept for [`Fs::find_moves`]: a frame rewritten where it was
    /// commits as a move). Apart, each frame was two pieces and a 64 KiB window of frames passed
    /// the rewrite threshold every 16 frames (a window copy; docs/benchmarks.md). `None`: place
    /// the write as usual ([`Fs::place`]); `Some` with `continue_tail`'s run when that worked.
    /// The caller copies the earlier bytes (at most [`REJOIN_MAX_BYTES`]) to the placement's
    /// start and puts the pieces from [`Rejoined::from`].
    pub(super) fn rejoin_placement(
        &self,
        state: &mut FileState,
        offset: u64,
        len: u64,
        promise_cap: u64,
        overwrite: bool,
    ) -> Result<Option<Rejoined>> {
        let Some((next, end)) = state.tail else {
            return Ok(None);
        };
        if len <= end - next
            || state.tail_continues_at != Some(offset)
            || (promise_cap > 0 && state.promised > 0)
        {
            return Ok(None);
        }
        let Some((from, earlier)) = state.map.before(offset) else {
            return Ok(None);
        };
        if !earlier.fresh
            || earlier.eno != 0
            || from + earlier.len != offset
            || earlier.addr + earlier.len != next
            || earlier.len > REJOIN_MAX_BYTES
        {
            return Ok(None);
        }
        if let Some(placement) = self.continue_tail(state, offset, len, promise_cap, overwrite) {
            return Ok(Some(Rejoined {
                from: offset,
                placement,
            }));
        }
        let align = Some(earlier.addr % BLOCK_SIZE);
        let placement = self.place(
            state,
            from,
            earlier.len + len,
            promise_cap,
            overwrite,
            align,
        )?;
        Ok(Some(Rejoined { from, placement }))
    }

    /// Space for a write that continues the file's previous one but does not fit in the tail
    /// block (SQLite's log: each frame is a 24-byte header, then its page): the tail's free bytes
    /// and the blocks right after the tail block, so that the two writes are one run of the data
    /// zone and the commit joins them into one piece. Placed apart, a frame was two pieces, its
    /// page in a block of its own and its header in a half-empty tail block, and a 64 KiB window
    /// of frames passed the rewrite threshold. `None` (nothing taken) when the blocks after the
    /// tail block are not free, when the file's promise is involved, when the result would not
    /// fit one extent, or for an overwrite into untouched pages of a lazily populated image (see
    /// [`Fs::place`]).
    fn continue_tail(
        &self,
        state: &mut FileState,
        offset: u64,
        len: u64,
        promise_cap: u64,
        overwrite: bool,
    ) -> Option<Placement> {
        let (next, end) = state.tail?;
        if state.tail_continues_at != Some(offset)
            || (promise_cap > 0 && state.promised > 0)
            || !fits_one_extent(next, len)
        {
            return None;
        }
        debug_assert_eq!(end % BLOCK_SIZE, 0, "a tail ends its block");
        let after = end / BLOCK_SIZE;
        let blocks = (len - (end - next)).div_ceil(BLOCK_SIZE);
        if overwrite && self.blocks.is_untouched(after) {
            return None;
        }
        if !self.blocks.alloc_exact(after, blocks) {
            return None;
        }
        state.goal = Some(after + blocks);
        let new_next = next + len;
        let new_end = new_next.next_multiple_of(BLOCK_SIZE);
        state.tail = (new_next < new_end).then_some((new_next, new_end));
        state.tail_continues_at = Some(offset + len);
        Some(smallvec::smallvec![(next, len)])
    }

    /// Frees the blocks of bytes just dropped from the map (addr, len, fresh) that nothing uses
    /// any more, and sets aside for the next commit those of non-fresh pieces (see the module
    /// doc). Ranges may share blocks (the pieces of one split); each block is freed once.
    pub(super) fn free_dropped(&self, state: &mut FileState, dropped: &[(u64, u64, bool)]) {
        let mut blocks: SmallVec<[u64; 8]> = SmallVec::new();
        for &(addr, len, fresh) in dropped {
            let (first, end) = (addr / BLOCK_SIZE, (addr + len).div_ceil(BLOCK_SIZE));
            if !fresh {
                state.deferred.extend(first..end);
                continue;
            }
            for block in first..end {
                let whole = block * BLOCK_SIZE >= addr && (block + 1) * BLOCK_SIZE <= addr + len;
                debug_assert!(!whole || state.tail_block() != Some(block));
                if whole || state.partial_block_unused(block) {
                    blocks.push(block);
                }
            }
        }
        self.free_outside_commit(state, blocks)
    }

    /// Frees blocks a write gave up outside a commit (fresh bytes overwritten, a tail block left
    /// behind). One of them may be a block of an extent the file's last commit retired, which
    /// that commit's record names while its log may replay it (`settle`, rule 2: a replay would
    /// clear its bitmap bit under whoever took it next): while the log is unsettled they are
    /// held with what it holds for the record.
    pub(super) fn free_outside_commit(&self, state: &FileState, blocks: SmallVec<[u64; 8]>) {
        if blocks.is_empty() {
            return;
        }
        let replayable = self.settler.unsettled_log_of(state.last_commit).is_some();
        if !replayable || fault::active(fault::Fault::SkipLimbo) {
            return self.free_blocks(blocks);
        }
        let frees = Limbo {
            blocks: runs_of(blocks),
            ..Limbo::default()
        };
        let released = self.settler.hold_more_for_log(state.last_commit, frees);
        if !released.is_empty() {
            self.return_to_pools(&released);
        }
    }

    /// Frees a list of blocks (in any order, possibly repeated) as runs.
    pub(super) fn free_blocks(&self, blocks: SmallVec<[u64; 8]>) {
        runs_of(blocks)
            .into_iter()
            .for_each(|(start, n)| self.blocks.free(start, n));
    }
}

/// Most bytes of an earlier write [`Fs::rejoin_placement`] places again: a log record's header,
/// not data worth copying twice.
pub(super) const REJOIN_MAX_BYTES: u64 = 512;

/// A write placed together with the earlier write it continues ([`Fs::rejoin_placement`]).
#[derive(Debug)]
pub(super) struct Rejoined {
    /// The file offset the placement starts at: the earlier write's, or the write's own when
    /// it simply continued the tail.
    pub from: u64,
    /// Space for the bytes from `from` to the write's end.
    pub placement: Placement,
}

/// Blocks (in any order, possibly repeated) as sorted runs (start, count).
pub(super) fn runs_of(mut blocks: SmallVec<[u64; 8]>) -> SmallVec<[(u64, u64); 4]> {
    blocks.sort_unstable();
    blocks.dedup();
    let mut runs = SmallVec::new();
    let mut i = 0;
    while i < blocks.len() {
        let start = blocks[i];
        let mut n = 1;
        while i + n < blocks.len() && blocks[i + n] == start + n as u64 {
            n += 1;
        }
        runs.push((start, n as u64));
        i += n;
    }
    runs
}

/// Longest write whose bytes a file keeps in DRAM until its next write
/// ([`FileState::recent_write`]): a log record's header.
const RECENT_WRITE_MAX_BYTES: usize = 64;

/// A short write's bytes and where they went: while a piece starts at `offset`, at `addr`,
/// `len` bytes long, these are its bytes (a piece's bytes never change in place).
#[derive(Debug, Clone, Copy)]
pub(super) struct RecentWrite {
    offset: u64,
    addr: u64,
    len: usize,
    bytes: [u8; RECENT_WRITE_MAX_BYTES],
}

impl RecentWrite {
    /// The write of `data` at `offset` placed at `placement`, if short and in one range.
    fn of(offset: u64, placement: &Placement, data: &[u8]) -> Option<RecentWrite> {
        let (&[(addr, _)], true) = (&placement[..], data.len() <= RECENT_WRITE_MAX_BYTES) else {
            return None;
        };
        let mut bytes = [0u8; RECENT_WRITE_MAX_BYTES];
        bytes[..data.len()].copy_from_slice(data);
        Some(RecentWrite {
            offset,
            addr,
            len: data.len(),
            bytes,
        })
    }
}
