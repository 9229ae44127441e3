//! File data: reads, Non-Copy-On-Write writes, truncate and fsync (seed 001, III-D).
//!
//! **Writes** put their bytes in fresh space and change only the file's DRAM map
//! ([`FileMap`]): the pieces they overlap are split, and the parts outside the write keep their
//! bytes where they are, so an overwrite never copies unmodified data. The bytes reach NVM with
//! flushes as they are written; no fence is paid until fsync.
//!
//! **Space for sub-block writes.** Each file owns at most one partly used *tail block*: a write
//! that fits in the rest of it goes there, right after the previous one. So a stream of 1 KiB
//! writes fills each 4 KiB block four times instead of taking a block each, and 1 KiB appends stay
//! contiguous (and merge into one extent at fsync). A write that does not fit gets whole blocks
//! (preferring the ones right after the file's last allocation), and the unused end of its last
//! block becomes the new tail. Several pieces may therefore point into one block; a block is freed
//! only when no piece of the file, committed or pending, holds a byte of it and it is not the
//! tail. Blocks are never shared between files.
//!
//! **Freeing blocks** costs O(1) per piece, not a search of the file: each file counts, per
//! block, the pieces and the committed extents that touch the block without covering all of it
//! ([`BlockRefs`]). When a piece drops bytes (an overwrite, a truncate), the blocks of those bytes
//! are in use exactly when a count says so (a range covering the whole block would hold the
//! dropped bytes too). If the piece was *fresh* (written since the last commit, so no committed
//! extent holds its bytes), its blocks are freed at once when no count holds them; otherwise the
//! committed extent still holds them until the next commit, and they are reconsidered then.
//!
//! **fsync** ([`Fs::fsync`]) merges pending pieces with neighbours they continue (in the file and
//! in the data zone), rewrites any 64 KiB window of the file that has grown more than 32 pieces
//! (the fragmentation policy), then commits all pending pieces as extents and retires the extents
//! they replace in one file-journal transaction ([`super::journal::commit`]). Everything written
//! since the previous commit becomes durable at once; a crash before leaves the file as the
//! previous commit left it. A truncate is a commit too (metadata operations are durable on return),
//! and so it also commits pending writes.

pub(crate) mod chunkmap;
pub mod compact;
pub(crate) mod filemap;
pub mod holes;
pub mod journal;
pub mod lent;
pub mod mmap;
mod mmap_sys;
mod ranges;
mod watch;

pub use watch::SizeSink;
pub(crate) mod reserve;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;

use smallvec::SmallVec;
use zerocopy::little_endian::{U16, U32, U64};

use crate::error::{Errno, Result};
use crate::format::extent::{self, Extent};
use crate::format::pinode::Pinode;
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::mkfs::now_ns;
use filemap::{BlockRefs, FileMap, Piece, Punched};
use journal::FileCommit;

/// Largest file size (64 TiB); offsets past it are EFBIG for writes and EINVAL for reads.
pub const MAX_FILE_BYTES: u64 = 1 << 46;
/// The fragmentation policy's window: a window of the file holding more than
/// [`WINDOW_MAX_PIECES`] pieces at fsync is rewritten as one.
pub const WINDOW_BYTES: u64 = 64 << 10;
/// See [`WINDOW_BYTES`]: 32 pieces in 64 KiB is 2 KiB per piece on average.
pub const WINDOW_MAX_PIECES: usize = 32;
/// How much of the next piece a read fetches ahead while it copies the current one.
const PREFETCH_PIECE_BYTES: u64 = 256;
/// Writes from this size on use non-temporal stores: no line-by-line `clwb` (64 per 4 KiB), at
/// the price of a fence before the commit point, since the data bypasses the cache and cannot be
/// read back cheaply for the commit's checksum. Measured on 4 KiB append + fsync: 2.7 µs with
/// non-temporal stores and 4 fences against 3.3 µs with `clwb` and 3 fences.
const NT_COPY_MIN_BYTES: usize = 4 << 10;
/// Up to this much new data a commit checksums its data (written through the cache, so the
/// checksum reads it from there); above it the data is fenced instead. Below the non-temporal
/// threshold, so non-temporal data is always fenced.
const CHECKSUM_DATA_MAX_BYTES: u64 = NT_COPY_MIN_BYTES as u64 - 1;

/// A regular file's data state, under its own lock (taken after the inode lock when both are).
#[derive(Debug)]
pub struct FileState {
    /// The file as reads see it: committed and pending pieces.
    map: FileMap,
    /// The blocks the committed extents (what the media holds) share ([`BlockRefs`]).
    committed_refs: BlockRefs,
    /// Committed extents that left `map` since the last commit: (eno, addr, len).
    removed: Vec<(u32, u64, u64)>,
    /// Blocks that bytes dropped from non-fresh pieces touched: a committed extent holds them
    /// until the next commit, which frees those that nothing holds then.
    deferred: Vec<u64>,
    size: u64,
    committed_size: u64,
    mtime_ns: i64,
    committed_mtime_ns: i64,
    /// Free bytes `[next, end)` of the tail block.
    tail: Option<(u64, u64)>,
    /// The file offset right after the bytes placed just before the tail: a write starting
    /// there continues them, in the file and (placed from the tail on) in the data zone.
    tail_continues_at: Option<u64>,
    /// Bytes written (or rewritten) since the last commit.
    dirty_bytes: u64,
    /// The block after the file's last allocation, tried first for the next one.
    goal: Option<u64>,
    /// The file lost its last name and its space went back; nothing may use it.
    released: bool,
    /// Blocks fallocate promised it ([`Fs::reserve_space`]), spent by its writes into the
    /// holes of `reserved` before the blocks anyone may take.
    promised: u64,
    /// The byte ranges fallocate reserved (`reserve`), as the attribute blob stores them.
    reserved: reserve::Ranges,
    /// Windows the compactor copied, for the next commit to take (`compact`).
    prepared: Vec<compact::Plan>,
    /// Writes so far: the compactor commits alone only while it stays unchanged.
    writes: u64,
    /// A punch since the last commit may have left two committed pieces side by side that the
    /// media's list does not link (see [`Fs::relink_around_removed`]). Only a punch drops
    /// pieces without putting new ones in their place or cutting the list's end.
    punched: bool,
    /// Who is told the size at every change ([`Fs::watch_size`]).
    watchers: watch::Watchers,
}

impl FileState {
    /// A new, empty file.
    pub fn new(now: i64) -> FileState {
        FileState {
            map: FileMap::default(),
            committed_refs: BlockRefs::default(),
            removed: Vec::new(),
            deferred: Vec::new(),
            size: 0,
            committed_size: 0,
            mtime_ns: now,
            committed_mtime_ns: now,
            tail: None,
            tail_continues_at: None,
            dirty_bytes: 0,
            goal: None,
            released: false,
            promised: 0,
            reserved: Vec::new(),
            prepared: Vec::new(),
            writes: 0,
            punched: false,
            watchers: watch::Watchers::default(),
        }
    }

    /// The state of a file as the media holds it: `extents` are (eno, file offset, addr, len) in
    /// list order, already checked by the caller.
    pub fn from_media(size: u64, mtime_ns: i64, extents: &[(u32, u64, u64, u64)]) -> FileState {
        let mut state = FileState::new(mtime_ns);
        for &(eno, offset, addr, len) in extents {
            let piece = Piece {
                addr,
                len,
                eno,
                fresh: false,
            };
            state.map.insert(offset, piece);
            state.committed_refs.add(addr, len);
        }
        (state.size, state.committed_size) = (size, size);
        state
    }

    fn is_dirty(&self) -> bool {
        self.map.pending_count() > 0
            || !self.prepared.is_empty()
            || !self.removed.is_empty()
            || self.size != self.committed_size
            || self.mtime_ns != self.committed_mtime_ns
    }

    fn tail_block(&self) -> Option<u64> {
        self.tail.map(|(next, _)| next / BLOCK_SIZE)
    }

    /// Whether nothing of the file holds a byte of `block`, which no piece or committed extent
    /// covers whole (a block that just lost bytes, or the tail block).
    fn partial_block_unused(&self, block: u64) -> bool {
        !self.map.refs().touched(block)
            && !self.committed_refs.touched(block)
            && self.tail_block() != Some(block)
    }

    /// Blocks `st_blocks` counts (in 4 KiB units): those the data holds, or, for a file with
    /// ranges fallocate reserved, every block the ranges touch (as ext4 and tmpfs count a
    /// preallocation, written or not) plus what the data holds outside them, whichever is more.
    /// O(pieces inside the ranges); O(1) for a file without.
    pub fn allocated_blocks(&self) -> u64 {
        let data = self.data_bytes().div_ceil(BLOCK_SIZE);
        if self.reserved.is_empty() {
            return data;
        }
        let (mut touched, mut inside) = (0u64, 0u64);
        let mut last_block: Option<u64> = None;
        for &(start, end) in &self.reserved {
            let (first, after) = (start / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
            // Two ranges may share a block at their edges: it counts once.
            let shared = u64::from(last_block == Some(first));
            touched += after - first - shared;
            last_block = Some(after - 1);
            inside += self
                .map
                .overlapping(start, end)
                .map(|(o, p)| (o + p.len).min(end) - o.max(start))
                .sum::<u64>();
        }
        let outside = self.data_bytes() - inside;
        data.max(touched + outside.div_ceil(BLOCK_SIZE))
    }

    /// Bytes the file's pieces hold (its data, holes excluded).
    pub fn data_bytes(&self) -> u64 {
        self.map.bytes()
    }

    /// Size and modification time as stat reports them (pending writes included).
    pub fn size_and_mtime(&self) -> (u64, i64) {
        (self.size, self.mtime_ns)
    }

    /// Sets the modification time (utimens); when nothing else is pending, the new pinode version
    /// that utimens commits already holds it.
    pub fn set_mtime(&mut self, mtime_ns: i64) {
        if self.mtime_ns == self.committed_mtime_ns {
            self.committed_mtime_ns = mtime_ns;
        }
        self.mtime_ns = mtime_ns;
    }

    /// Pieces in the DRAM map (committed and pending).
    pub fn piece_count(&self) -> usize {
        self.map.len()
    }
}

/// Whether `len` bytes at data-zone address `addr` fit in one extent.
fn fits_one_extent(addr: u64, len: u64) -> bool {
    len <= u64::from(u32::MAX)
        && Extent::blocks_needed(addr % BLOCK_SIZE, len) <= extent::MAX_BLOCKS
}

/// Replaces two neighbouring pieces by one pending piece if `right` continues `left` both in the
/// file and in the data zone and the result fits one extent; a committed side's extent is retired
/// at the commit. Returns the joined piece.
fn join(
    state: &mut FileState,
    (left_offset, left): (u64, Piece),
    (right_offset, right): (u64, Piece),
) -> Option<(u64, Piece)> {
    let continues = left_offset + left.len == right_offset && left.addr_end() == right.addr;
    if !continues || !fits_one_extent(left.addr, left.len + right.len) {
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

/// Data-zone ranges a write's bytes go to, in order.
type Placement = SmallVec<[(u64, u64); 2]>;

impl Fs {
    /// The data state of a regular file, made from its primary pinode and extent list on first
    /// use (mount checks every list but builds no state: most files are never opened); EISDIR /
    /// EINVAL for anything else, ENOENT once the file is gone. The caller must not hold the
    /// inode lock: making the state takes it, so a concurrent utimens cannot slip between the
    /// pinode read here and the state's publication.
    fn file_of<'a>(&self, inode: &'a Inode) -> Result<&'a parking_lot::Mutex<FileState>> {
        if let Some(state) = inode.file_state() {
            return Ok(state);
        }
        if !inode.is_file() {
            let errno = if inode.dir().is_some() {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            };
            return Err(errno.into());
        }
        let _locked = inode.data.lock();
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let p = self.primary_pinode(inode)?;
        Ok(inode.file_state_or_make(|| {
            // No state yet means nothing pending: the media holds the whole file.
            FileState::from_media(p.size.get(), p.mtime_ns.get(), &self.file_extents(&p))
        }))
    }

    /// A regular file's committed extents as (eno, file offset, data-zone address, length), from
    /// its list on the media.
    fn file_extents(&self, p: &Pinode) -> Vec<(u32, u64, u64, u64)> {
        self.extent_list(p)
            .into_iter()
            .map(|(eno, e)| {
                assert!(e.is_valid(), "extent {eno} of a checked list is not valid");
                let addr =
                    u64::from(e.start_block.get()) * BLOCK_SIZE + u64::from(e.block_offset.get());
                (eno, e.file_offset.get(), addr, u64::from(e.length.get()))
            })
            .collect()
    }

    /// Reads up to `buf.len()` bytes at `offset` of regular file `ino`; returns the bytes read
    /// (short at end of file). Holes read as zeros.
    pub fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if offset > MAX_FILE_BYTES {
            return Err(Errno::EINVAL.into());
        }
        let inode = self.inode(ino)?;
        let n = match self.read_shadowed(ino, offset, buf) {
            Some(n) => n,
            None => {
                let state = self.file_of(&inode)?.lock();
                self.read_locked(&state, offset, buf)
            }
        };
        self.note_access(&inode);
        Ok(n)
    }

    fn read_locked(&self, state: &FileState, offset: u64, buf: &mut [u8]) -> usize {
        if offset >= state.size {
            return 0;
        }
        let end = state.size.min(offset + buf.len() as u64);
        if state.map.is_empty() {
            buf[..(end - offset) as usize].fill(0);
            return (end - offset) as usize;
        }
        let base = self.image.geometry().block_offset(0);
        let mut at = offset;
        let mut pieces = state.map.overlapping(offset, end).peekable();
        while let Some((piece_offset, piece)) = pieces.next() {
            // The next piece's first lines are fetched while this one is copied: a fragmented
            // range (the window rewrite, reads of a file that took small overwrites) would
            // otherwise wait for one miss per piece before the prefetcher catches on.
            if let Some((_, next)) = pieces.peek() {
                let region = self.image.region();
                let first = base + next.addr;
                for line in 0..next.len.min(PREFETCH_PIECE_BYTES).div_ceil(64) {
                    region.prefetch(first + line * 64);
                }
            }
            let from = piece_offset.max(offset);
            buf[(at - offset) as usize..(from - offset) as usize].fill(0);
            let to = (piece_offset + piece.len).min(end);
            let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
            let src = base + piece.addr + (from - piece_offset);
            self.image.region().read_bytes(src, dst);
            at = to;
        }
        buf[(at - offset) as usize..(end - offset) as usize].fill(0);
        (end - offset) as usize
    }

    /// Writes `data` at `offset` of regular file `ino` (a write past the end leaves a hole).
    /// Durable at the next fsync, or on return when mounted with `sync`.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.writable()?;
        let inode = self.inode(ino)?;
        self.write_at(&inode, Some(offset), data)?;
        self.write_shadowed(ino, offset, data)?;
        Ok(data.len())
    }

    /// Appends `data` to regular file `ino` (O_APPEND: the end is found under the file's lock,
    /// so concurrent appends never overwrite each other). Returns the offset written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> Result<u64> {
        self.writable()?;
        let inode = self.inode(ino)?;
        let offset = self.write_at(&inode, None, data)?;
        self.write_shadowed(ino, offset, data)?;
        Ok(offset)
    }

    pub(crate) fn write_at(&self, inode: &Inode, offset: Option<u64>, data: &[u8]) -> Result<u64> {
        let file = self.file_of(inode)?;
        let mut state = file.lock();
        state.writes = state.writes.wrapping_add(1);
        if state.released {
            return Err(Errno::ENOENT.into());
        }
        let offset = offset.unwrap_or(state.size);
        let len = data.len() as u64;
        if offset
            .checked_add(len)
            .map_or(true, |end| end > MAX_FILE_BYTES)
        {
            return Err(Errno::EFBIG.into());
        }
        if len == 0 {
            return Ok(offset);
        }
        let promise_cap = if state.reserved.is_empty() {
            0
        } else {
            reserve::cap_blocks(&state.reserved, &state.map, offset, offset + len)
        };
        let overwrite = offset + len <= state.size;
        let placement = self.place(&mut state, offset, len, promise_cap, overwrite)?;
        self.store_data(&placement, data);
        self.put_pieces(&mut state, offset, &placement);
        if offset + len > state.size {
            state.set_size(offset + len);
        }
        state.mtime_ns = now_ns();
        state.dirty_bytes += len;
        if self.sync_writes {
            drop(state);
            self.fsync_inode(inode)?;
        }
        Ok(offset)
    }

    /// Copies `data` to the ranges of `placement`, flushed (or non-temporal).
    fn store_data(&self, placement: &Placement, data: &[u8]) {
        let region = self.image.region();
        let base = self.image.geometry().block_offset(0);
        let mut done = 0usize;
        for &(addr, len) in placement {
            let chunk = &data[done..done + len as usize];
            if data.len() >= NT_COPY_MIN_BYTES {
                region.copy_nt(base + addr, chunk);
            } else {
                region.write_bytes(base + addr, chunk);
                region.flush(base + addr, len);
            }
            done += len as usize;
        }
    }

    /// Replaces file bytes `[offset, ...)` by the pieces of `placement`, and frees what no piece
    /// holds any more.
    fn put_pieces(&self, state: &mut FileState, offset: u64, placement: &Placement) {
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
        state.removed.extend(punched.removed);
        self.free_dropped(state, &punched.dropped);
    }

    /// Space for `len` new bytes: the rest of the tail block when they fit there, else whole
    /// blocks, the unused end of the last one becoming the tail; up to `promise_cap` of them
    /// from the file's promise. An `overwrite` (bytes inside the file) continues after the
    /// file's last blocks only where that touches no fresh page of a lazily populated image
    /// ([`BlockAllocator::is_untouched`]); an append continues there always, so a growing file
    /// stays contiguous. ENOSPC takes nothing.
    ///
    /// [`BlockAllocator::is_untouched`]: crate::alloc::BlockAllocator::is_untouched
    fn place(
        &self,
        state: &mut FileState,
        offset: u64,
        len: u64,
        promise_cap: u64,
        overwrite: bool,
    ) -> Result<Placement> {
        if let Some((next, end)) = state.tail {
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
        let mut placement = Placement::new();
        let mut runs: SmallVec<[(u64, u64); 2]> = SmallVec::new();
        let mut need = len;
        // The part of the promise this write may spend, spent from a copy and settled at the end.
        let usable_before = state.promised.min(promise_cap);
        let mut usable = usable_before;
        while need > 0 {
            let want = need.div_ceil(BLOCK_SIZE).min(extent::MAX_BLOCKS);
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
            let bytes = (count * BLOCK_SIZE).min(need);
            placement.push((start * BLOCK_SIZE, bytes));
            need -= bytes;
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
                self.blocks.free(old, 1);
            }
        }
        Ok(placement)
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
    fn free_dropped(&self, state: &mut FileState, dropped: &[(u64, u64, bool)]) {
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
        self.free_blocks(blocks)
    }

    /// Frees a list of blocks (in any order, possibly repeated) as runs.
    fn free_blocks(&self, blocks: SmallVec<[u64; 8]>) {
        runs_of(blocks)
            .into_iter()
            .for_each(|(start, n)| self.blocks.free(start, n));
    }

    /// Returns all space of a file that lost its last name, once the directory commit that took
    /// it is settled (its committed extents' numbers are held back by the caller, which read
    /// them from the media).
    pub(crate) fn release_file_space(&self, state: &mut FileState) {
        // Every block the file holds: its pieces' (which include the committed extents still
        // in the map), the extents that left the map since the last commit, the blocks set aside
        // for that commit, and the tail.
        let mut blocks: SmallVec<[u64; 8]> = SmallVec::new();
        let ranges = state.map.iter().map(|(_, p)| (p.addr, p.len));
        for (addr, len) in ranges.chain(state.removed.iter().map(|r| (r.1, r.2))) {
            blocks.extend(addr / BLOCK_SIZE..(addr + len).div_ceil(BLOCK_SIZE));
        }
        blocks.extend(state.deferred.iter().copied());
        blocks.extend(state.tail_block());
        self.drop_prepared(state);
        self.hold_back(|limbo| limbo.blocks.extend(runs_of(blocks)));
        self.blocks.release_promise(state.promised);
        *state = FileState::new(state.mtime_ns);
        state.released = true;
    }

    /// Pieces of regular file `ino`'s data (committed extents and pending writes): how
    /// fragmented it is.
    pub fn file_pieces(&self, ino: u64) -> Result<usize> {
        let inode = self.inode(ino)?;
        let pieces = self.file_of(&inode)?.lock().piece_count();
        Ok(pieces)
    }

    /// Makes everything written to regular file `ino` durable, atomically. A directory or any
    /// other type has nothing pending: Ok.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        let inode = self.inode(ino)?;
        self.fsync_inode(&inode)
    }

    fn fsync_inode(&self, inode: &Inode) -> Result<()> {
        // Stores through mappings join the commit as writes (see `mmap`).
        self.take_mapped_writes(inode, None)?;
        self.commit_inode(inode)
    }

    /// Commits the file's pending writes (not its mapped stores: see [`Fs::fsync`]).
    fn commit_inode(&self, inode: &Inode) -> Result<()> {
        let _locked = inode.data.lock();
        if inode.removed.load(Ordering::Acquire) {
            return Ok(());
        }
        // A file without state has nothing pending; other types never have any.
        let Some(file) = inode.file_state() else {
            return Ok(());
        };
        self.commit_file(inode, &mut file.lock())
    }

    /// Commits the pending writes of every file (syncfs) and settles the directory logs, so a
    /// crash now replays nothing. Returns the first error, after trying every file.
    pub fn sync_all(&self) -> Result<()> {
        let mut first_error = Ok(());
        for inode in self.inodes.all() {
            if inode.file_state().is_some() {
                let result = self.fsync_inode(&inode);
                if first_error.is_ok() {
                    first_error = result;
                }
            }
        }
        self.settle_all();
        first_error
    }

    /// Sets regular file `ino`'s size: shrinking drops the data past it, growing leaves a hole.
    /// Durable on return (it commits the file's pending writes with it).
    pub fn truncate(&self, ino: u64, size: u64) -> Result<()> {
        self.writable()?;
        if size > MAX_FILE_BYTES {
            return Err(Errno::EFBIG.into());
        }
        let inode = self.inode(ino)?;
        let file = self.file_of(&inode)?;
        let mut locked = inode.data.lock();
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut state = file.lock();
        let shrinks = size < state.size;
        if shrinks {
            let mut punched = Punched::default();
            state.map.punch(size, u64::MAX, &mut punched);
            state.removed.extend(punched.removed);
            self.free_dropped(&mut state, &punched.dropped);
        }
        state.set_size(size);
        state.mtime_ns = now_ns();
        self.commit_file(&inode, &mut state)?;
        drop(state);
        if shrinks {
            // ext4 frees the blocks past the new size, reserved ones too.
            self.change_reservation(&inode, &mut locked, |r| reserve::remove(r, size, u64::MAX))?;
        }
        drop(locked);
        self.truncate_shadowed(ino, size)
    }

    /// Commits the file's pending state (the caller holds its inode lock and file lock).
    fn commit_file(&self, inode: &Inode, state: &mut FileState) -> Result<()> {
        if !state.is_dirty() {
            return Ok(());
        }
        self.merge_pending(state);
        self.install_prepared(state);
        if self.compaction_deferred() {
            self.queue_crowded(inode.ino, state);
        } else {
            self.defragment(state);
        }
        if std::mem::take(&mut state.punched) {
            self.relink_around_removed(state);
        }
        let offsets = state.map.pending();
        let enos = self.alloc_extents(offsets.len())?;
        for (&offset, &eno) in offsets.iter().zip(&enos) {
            state.map.set_eno(offset, eno);
        }
        let new = self.extent_records(inode.ino, state, &offsets);
        let removed: Vec<u32> = state.removed.iter().map(|r| r.0).collect();
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
            data_fenced: state.dirty_bytes > CHECKSUM_DATA_MAX_BYTES,
        };
        let Some(overflow) = self.alloc_overflow(c.overflow_blocks_needed()) else {
            offsets.iter().for_each(|&o| state.map.set_eno(o, 0));
            enos.iter().for_each(|&e| self.extents.free(e));
            return Err(Errno::ENOSPC.into());
        };
        let log = self.take_file_log();
        // Blocks of the retired extents that no new extent covers: no piece covers them whole
        // (they held retired bytes), so the counts tell whether one still uses them.
        journal::commit(&self.image, log, &overflow, &c, &|b| {
            state.map.refs().touched(b)
        });
        self.file_logs.free(log as u32);
        overflow.iter().for_each(|&b| self.blocks.free(b, 1));
        self.after_commit(state, &new);
        self.debug_check_list(inode, state);
        Ok(())
    }

    /// Debug builds: the media's extent list of a small file is exactly its map, in order.
    fn debug_check_list(&self, inode: &Inode, state: &FileState) {
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
    fn relink_around_removed(&self, state: &mut FileState) {
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
    /// set aside for this commit and extents that left the map are freed.
    fn after_commit(&self, state: &mut FileState, new: &[(u32, Extent)]) {
        let removed = std::mem::take(&mut state.removed);
        for &(_, addr, len) in &removed {
            state.committed_refs.remove(addr, len);
        }
        for (_, e) in new {
            let addr =
                u64::from(e.start_block.get()) * BLOCK_SIZE + u64::from(e.block_offset.get());
            state.committed_refs.add(addr, u64::from(e.length.get()));
        }
        // Only blocks that lost bytes can be free now, so this stays O(change), not O(file): an
        // append merged into a long extent retires it whole, yet frees nothing.
        let deferred = std::mem::take(&mut state.deferred);
        let tail = state.tail_block();
        let unused = deferred
            .into_iter()
            .filter(|&b| !state.map.refs().touched(b) && tail != Some(b));
        self.free_blocks(unused.collect());
        removed.iter().for_each(|r| self.extents.free(r.0));
        state.committed_size = state.size;
        state.committed_mtime_ns = state.mtime_ns;
        state.dirty_bytes = 0;
        debug_assert!(!state.is_dirty());
        debug_assert_eq!(state.committed_refs, *state.map.refs());
    }

    fn alloc_extents(&self, count: usize) -> Result<Vec<u32>> {
        let mut enos = Vec::with_capacity(count);
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

    fn alloc_overflow(&self, count: usize) -> Option<Vec<u64>> {
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

    /// A free file log. There are far more logs than threads committing at once, so waiting for
    /// one is a formality.
    fn take_file_log(&self) -> u64 {
        loop {
            if let Some(log) = self.file_logs.alloc(&self.image) {
                return u64::from(log);
            }
            std::thread::yield_now();
        }
    }

    /// The extent records of the pieces at `offsets` (numbers assigned), linked to their
    /// neighbours in the file, valid bit clear.
    fn extent_records(&self, ino: u64, state: &FileState, offsets: &[u64]) -> Vec<(u32, Extent)> {
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
    /// the file and in the data zone (appends, 1 KiB writes packed in a tail block).
    fn merge_pending(&self, state: &mut FileState) {
        let offsets = state.map.pending();
        for offset in offsets {
            let Some(piece) = state.map.get(offset) else {
                continue; // merged into an earlier one
            };
            let mut at = (offset, piece);
            while let Some(joined) = state.map.before(at.0).and_then(|q| join(state, q, at)) {
                at = joined;
            }
            while let Some(joined) = state.map.after(at.0).and_then(|r| join(state, at, r)) {
                at = joined;
            }
        }
    }

    /// The fragmentation policy: any 64 KiB window with a pending piece and more than 32 pieces is
    /// rewritten into fresh contiguous space as one piece. Skipped quietly when space is short.
    fn defragment(&self, state: &mut FileState) {
        let mut windows: Vec<u64> = state
            .map
            .pending()
            .iter()
            .map(|offset| offset / WINDOW_BYTES)
            .collect();
        windows.dedup();
        for window in windows {
            if compact::crowded(state, window) && !self.defragment_window(state, window) {
                return;
            }
        }
    }

    /// Rewrites one window's pieces into fresh contiguous space as one pending piece; false when
    /// space is short (nothing changed).
    fn defragment_window(&self, state: &mut FileState, window: u64) -> bool {
        let Some((from, to)) = window_span(state, window) else {
            return true; // nothing to rewrite
        };
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
            let placement = self.place(state, from, to - from, 0, true).ok()?;
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

/// The span a window's rewrite takes: from its first piece's start to its last one's end,
/// within the window and the file's size; None when that leaves nothing.
fn window_span(state: &FileState, window: u64) -> Option<(u64, u64)> {
    let (start, end) = (window * WINDOW_BYTES, (window + 1) * WINDOW_BYTES);
    let first = state.map.overlapping(start, end).next()?;
    let last = state.map.overlapping(start, end).last()?;
    let from = first.0.max(start);
    let to = (last.0 + last.1.len).min(end).min(state.size);
    (from < to).then_some((from, to))
}

/// The extent record of `len` bytes at file offset `offset`, data-zone address `addr`, between
/// extents `prev` and `next` (0: none), valid bit clear.
fn extent_record(ino: u64, offset: u64, addr: u64, len: u64, prev: u32, next: u32) -> Extent {
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

/// Blocks (in any order, possibly repeated) as sorted runs (start, count).
fn runs_of(mut blocks: SmallVec<[u64; 8]>) -> Vec<(u64, u64)> {
    blocks.sort_unstable();
    blocks.dedup();
    let mut runs = Vec::new();
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
