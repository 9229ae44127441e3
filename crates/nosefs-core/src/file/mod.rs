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
//! **Rewrites in place.** A write that starts exactly where a committed piece starts (a database
//! rewriting a record where it wrote it: LMDB's meta record, SQLite's log frames on the log's
//! next lap) puts its bytes at the same offset in their block as that piece had: in the tail
//! when its next byte is there, else in new blocks whose first bytes stay unused. Its commit can
//! then move the piece's extent (`Fs::find_moves`: a new start block, no new record, no links),
//! and it is not joined into the committed piece before it, which would grow that extent and cut
//! the next one at every frame of a log instead.
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
//!
//! Here: reads, writes, fsync and truncate, and a file's [`FileState`]; `place` decides where a
//! write's bytes go, `commit` is the DRAM side of a commit around [`journal::commit`].

pub(crate) mod apply;
mod blockrefs;
pub(crate) mod chunkmap;
mod commit;
pub mod compact;
mod crowding;
pub mod direct;
pub(crate) mod filemap;
pub mod holes;
mod inplace;
pub mod journal;
pub mod lent;
pub mod mmap;
mod mmap_sys;
mod place;
mod ranges;
mod watch;

pub use watch::SizeSink;
pub(crate) mod reserve;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use crate::error::{Errno, Result};
use crate::format::extent::{self, Extent};
use crate::format::pinode::Pinode;
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::mkfs::now_ns;
use blockrefs::BlockRefs;
use filemap::{FileMap, Piece, Punched};
use place::runs_of;
use place::RecentWrite;

/// Largest file size (64 TiB); offsets past it are EFBIG for writes and EINVAL for reads.
pub const MAX_FILE_BYTES: u64 = 1 << 46;
/// The fragmentation policy's window: a window of the file holding more than
/// [`WINDOW_MAX_PIECES`] pieces at fsync is rewritten as one.
pub const WINDOW_BYTES: u64 = 64 << 10;
/// See [`WINDOW_BYTES`]: 32 pieces in 64 KiB is 2 KiB per piece on average.
pub const WINDOW_MAX_PIECES: usize = 32;
/// How many extents a stat of a file with no data state reads to count its blocks before it
/// makes the state instead (see [`Fs::unloaded_file_blocks`]).
const UNLOADED_WALK_MAX_EXTENTS: u64 = 1024;
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
    /// The last write, when it was at most [`RECENT_WRITE_MAX_BYTES`] long and placed in one
    /// range, kept so that [`Fs::rejoin_placement`]'s copy of its bytes does not read back a
    /// line whose write-back is still in flight (that stalls as a fence would).
    recent_write: Option<RecentWrite>,
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
    /// Changes to the file's size or to where its bytes are ([`FileState::changed`]), counted
    /// since its state was made (64 bits: never reused).
    generation: u64,
    /// The file's last commit, as [`crate::settle::Settler::cleared_lazily`] named it (0: none
    /// since mount): its log may still hold it, unsettled (`settle`, rule 1).
    last_commit: u64,
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
            recent_write: None,
            dirty_bytes: 0,
            goal: None,
            released: false,
            promised: 0,
            reserved: Vec::new(),
            prepared: Vec::new(),
            writes: 0,
            punched: false,
            watchers: watch::Watchers::default(),
            generation: 0,
            last_commit: 0,
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

    /// Blocks `st_blocks` counts (in 4 KiB units): those the data pins ([`FileState::pinned_blocks`]),
    /// or, for a file with ranges fallocate reserved, every block the ranges touch (as ext4 and
    /// tmpfs count a preallocation, written or not) plus what the data holds outside them,
    /// whichever is more. O(pieces inside the ranges); O(1) for a file without.
    pub fn allocated_blocks(&self) -> u64 {
        let data = self.pinned_blocks();
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

    /// Blocks the file's pieces touch: those they cover whole, and those they share with bytes
    /// nothing uses (an overwrite that starts or ends inside a block keeps the old block for
    /// the bytes around it), as a block file system counts every block it allocated. Exact in
    /// O(1): the pieces' bytes plus the shared blocks' unused bytes are whole blocks.
    pub fn pinned_blocks(&self) -> u64 {
        let bytes = self.data_bytes() + self.map.refs().unused_bytes();
        debug_assert_eq!(
            bytes % BLOCK_SIZE,
            0,
            "pieces and unused bytes fill whole blocks"
        );
        bytes / BLOCK_SIZE
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

    /// `st_blocks` (in 4 KiB units) of a regular file whose data state is not made yet, as
    /// [`FileState::allocated_blocks`] would count it (the media holds the whole file, and a
    /// file with reserved ranges has its state from mount on): its extents' bytes below the
    /// size, read from its list without making the state, so that a stat of a sparse file
    /// after a mount (every process, in embedded mode) does not report it dense. Past
    /// [`UNLOADED_WALK_MAX_EXTENTS`] extents the state is made instead, once; the count is kept
    /// ([`crate::inode::InodeData::counted_blocks`]). The list is read
    /// under the inode lock (no state can appear and commit meanwhile); when the lock is taken
    /// (the caller's own, as `link` returns attributes under it), the file counts as dense.
    pub(crate) fn unloaded_file_blocks(&self, inode: &Inode) -> Result<u64> {
        {
            let Some(mut locked) = inode.data.try_lock() else {
                return Ok(self.primary_pinode(inode)?.size.get().div_ceil(BLOCK_SIZE));
            };
            if inode.file_state().is_none() {
                if let Some(blocks) = locked.counted_blocks() {
                    return Ok(blocks);
                }
                let p = self.primary_pinode(inode)?;
                let (size, count) = (p.size.get(), self.image.geometry().extent_count());
                let (mut eno, mut bytes) = (u64::from(p.extent_head.get()), 0u64);
                let mut shared = BlockRefs::default();
                let mut walked = 0;
                while eno != 0 && eno < count && walked < UNLOADED_WALK_MAX_EXTENTS {
                    let e = self.image.extent(eno);
                    let (start, len) = (e.file_offset.get(), u64::from(e.length.get()));
                    let held = start.saturating_add(len).min(size).saturating_sub(start);
                    if held > 0 {
                        let addr = u64::from(e.start_block.get()) * BLOCK_SIZE
                            + u64::from(e.block_offset.get());
                        shared.add(addr, held);
                    }
                    bytes += held;
                    eno = u64::from(e.next.get());
                    walked += 1;
                }
                if eno == 0 || eno >= count {
                    // As `FileState::pinned_blocks` counts them once the state is made.
                    let blocks = (bytes + shared.unused_bytes()).div_ceil(BLOCK_SIZE);
                    locked.set_counted_blocks(blocks);
                    return Ok(blocks);
                }
            }
        }
        Ok(self.file_of(inode)?.lock().allocated_blocks())
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
        if offset > i64::MAX as u64 {
            return Err(Errno::EINVAL.into()); // a negative offset to the kernel
        }
        if offset > MAX_FILE_BYTES {
            // Past the largest file: nothing to read, as the kernel answers past s_maxbytes.
            self.inode(ino)?;
            return Ok(0);
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
        self.place_and_store(&mut state, offset, data, promise_cap, overwrite)?;
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

    /// Returns all space of a file that lost its last name, once the directory commit that took
    /// it is settled (its committed extents' numbers are held back by the caller, which read
    /// them from the media).
    pub(crate) fn release_file_space(&self, state: &mut FileState) {
        state.changed();
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
            state.changed();
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
}
