//! The background compactor (issue 24): the fragmentation policy's window copy, off the
//! commit path. Opt-in (`nosefs mount -o compactor`): it shortens the tail of small random
//! overwrites + fsync but slows 4-16 KiB ones (docs/benchmarks.md has the figures).
//!
//! The policy (`crowding`: a 64 KiB window of more than [`WINDOW_MAX_PIECES`] pieces is rewritten into one
//! contiguous piece) keeps reads of a file that took many small overwrites within 2x of a fresh
//! one, and bounds the space small pieces pin. Run inside fsync it costs the fsync that crosses
//! the threshold a 64 KiB copy (the whole p99 of random overwrites + fsync). Once a frontend
//! starts the compactor ([`Fs::start_compactor`]), a commit only queues the crowded windows, and
//! the compactor's thread takes each:
//!
//! 1. under the file lock, briefly: the window's span and pieces are noted;
//! 2. with no lock held: fresh blocks are found for the span, its bytes copied into them and
//!    written back (a concurrent overwrite may free and reuse the old blocks meanwhile: then the
//!    pieces no longer match and the copy is dropped, never installed);
//! 3. under the file lock, briefly: if the pieces are still the ones noted, the copy is handed
//!    to the file ([`Fs::prepare_for_next_commit`]); the file's next commit, the writer's own
//!    fsync, checks them once more and takes the copy along as one new piece
//!    (`Fs::install_prepared`), as an inline rewrite would, without the copy. A file that
//!    stays idle for 100 µs instead gets the compactor's own commit when the span is exactly
//!    whole committed extents ([`Fs::compact_file`] runs the same in the caller): a file commit
//!    that replaces those extents and nothing else, so the file's pending writes, size and times
//!    stay out of it, what fsync makes durable atomically is unchanged, and a reader sees the
//!    same bytes before, during and after (the crash checker's `compact` and `prepare`
//!    workloads check both paths).
//!
//! Without a started compactor (the default; the embedded shim, which must not start threads
//! inside the programs it serves; the crash checker, which is single-threaded), commits rewrite
//! crowded windows inline as before. A window the compactor falls far behind on (past
//! `BEHIND_PIECES`) is rewritten inline too.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;

use crate::error::{Errno, Result};
use crate::format::extent::{self, Extent};
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::Inode;

use super::crowding::{crowded, pieces_over};
use super::filemap::{Piece, Punched};
use super::journal::FileCommit;
use super::{FileState, Placement, CHECKSUM_DATA_MAX_BYTES, WINDOW_BYTES, WINDOW_MAX_PIECES};

/// The compactor's state (one per mount).
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    /// Commits queue crowded windows instead of rewriting them.
    deferred: AtomicBool,
    /// The queue, shared with the thread, which waits on it without keeping the `Fs` alive.
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Windows rewritten, and rewrites given up (the window changed meanwhile, or no space).
    compacted: AtomicU64,
    abandoned: AtomicU64,
    /// Windows a commit rewrote itself because the compactor was behind on them.
    inline: AtomicU64,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// The CPU of the last commit that queued a window, plus one (0: none yet): the compactor
    /// keeps off it, so it never takes the CPU from the thread that is committing.
    queuer_cpu: AtomicU64,
}

#[derive(Debug, Default)]
struct Queue {
    jobs: VecDeque<(u64, u64)>,
    queued: HashSet<(u64, u64)>,
    stop: bool,
}

/// What step 1 noted about a window.
#[derive(Debug)]
pub(super) struct Plan {
    /// The pieces (file offset, piece) overlapping the span.
    pieces: Vec<(u64, Piece)>,
    /// Their span `[from, to)` and where it goes.
    from: u64,
    to: u64,
    placement: Placement,
}

impl Plan {
    /// Whether the span is exactly whole committed extents, which the compactor's own commit
    /// can replace without touching anything else of the file.
    fn is_whole(&self) -> bool {
        self.pieces
            .iter()
            .all(|(o, p)| p.eno != 0 && *o >= self.from)
            && self
                .pieces
                .last()
                .is_some_and(|(o, p)| o + p.len == self.to)
    }
}

/// Counts of the compactor's work, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Windows rewritten.
    pub compacted: u64,
    /// Rewrites given up because the window changed while its bytes were copied, or no space.
    pub abandoned: u64,
    /// Windows waiting.
    pub queued: u64,
    /// Windows a commit rewrote itself, the compactor being behind on them.
    pub inline: u64,
}

impl Shared {
    fn push(&self, job: (u64, u64)) {
        let cpu = rustix::thread::sched_getcpu() as u64 + 1;
        if self.queuer_cpu.load(Ordering::Relaxed) != cpu {
            self.queuer_cpu.store(cpu, Ordering::Relaxed);
        }
        self.requeue(job);
    }

    /// Queues `job` at the back (once).
    fn requeue(&self, job: (u64, u64)) {
        let mut q = self.queue.lock();
        if q.queued.insert(job) {
            q.jobs.push_back(job);
            self.wake.notify_one();
        }
    }

    fn pop(&self) -> Option<(u64, u64)> {
        let mut q = self.queue.lock();
        let job = q.jobs.pop_front()?;
        q.queued.remove(&job);
        Some(job)
    }

    /// The next job, waiting for one; None once stopped.
    fn wait(&self) -> Option<(u64, u64)> {
        let mut q = self.queue.lock();
        loop {
            if q.stop {
                return None;
            }
            if let Some(job) = q.jobs.pop_front() {
                q.queued.remove(&job);
                return Some(job);
            }
            self.wake.wait(&mut q);
        }
    }
}

impl Fs {
    /// Starts the compactor's thread: from now on commits queue crowded windows and the thread
    /// rewrites them. It holds only a weak reference, so the last `Arc` still unmounts; call
    /// [`Fs::stop_compactor`] before `Arc::try_unwrap`, so its short-lived strong reference
    /// cannot be in the way.
    pub fn start_compactor(fs: &Arc<Fs>) -> std::io::Result<()> {
        let mut thread = fs.compactor.thread.lock();
        if thread.is_some() || fs.is_read_only() {
            return Ok(());
        }
        fs.compactor.shared.queue.lock().stop = false;
        let (weak, shared) = (Arc::downgrade(fs), Arc::clone(&fs.compactor.shared));
        *thread = Some(
            std::thread::Builder::new()
                .name("nosefs-compact".into())
                .spawn(move || compactor_loop(&weak, &shared))?,
        );
        fs.compactor.deferred.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the compactor's thread (waiting for the window it is rewriting); commits rewrite
    /// crowded windows inline again. Windows still queued are left as they are.
    pub fn stop_compactor(&self) {
        self.compactor.deferred.store(false, Ordering::Release);
        let handle = self.compactor.thread.lock().take();
        self.compactor.shared.queue.lock().stop = true;
        self.compactor.shared.wake.notify_all();
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// Whether commits queue crowded windows instead of rewriting them: set by
    /// [`Fs::start_compactor`]; tests and the crash checker set it alone and run the queue with
    /// [`Fs::compact_queued`].
    pub fn set_deferred_compaction(&self, deferred: bool) {
        self.compactor.deferred.store(deferred, Ordering::Release);
    }

    pub(super) fn compaction_deferred(&self) -> bool {
        self.compactor.deferred.load(Ordering::Relaxed)
    }

    /// The compactor's counts.
    pub fn compaction_stats(&self) -> CompactionStats {
        CompactionStats {
            compacted: self.compactor.compacted.load(Ordering::Relaxed),
            abandoned: self.compactor.abandoned.load(Ordering::Relaxed),
            queued: self.compactor.shared.queue.lock().jobs.len() as u64,
            inline: self.compactor.inline.load(Ordering::Relaxed),
        }
    }

    /// Rewrites every queued window in the caller; returns how many were rewritten.
    pub fn compact_queued(&self) -> Result<u64> {
        let mut done = 0;
        while let Some((ino, window)) = self.compactor.shared.pop() {
            done += u64::from(self.compact_window(ino, window)?);
        }
        Ok(done)
    }

    /// Rewrites every crowded window of regular file `ino` whose pieces are all committed, in the
    /// caller; returns how many.
    pub fn compact_file(&self, ino: u64) -> Result<u64> {
        let inode = self.inode(ino)?;
        let file = self.file_of(&inode)?;
        let windows: Vec<u64> = {
            let state = file.lock();
            let mut w: Vec<u64> = state.map.iter().map(|(o, _)| o / WINDOW_BYTES).collect();
            w.dedup();
            w
        };
        let mut done = 0;
        for window in windows {
            done += u64::from(self.compact_window(ino, window)?);
        }
        Ok(done)
    }

    /// Queues the crowded windows that `state`'s pending pieces touch (a commit in deferred
    /// mode, instead of [`Fs::defragment`]). A window the compactor has fallen far behind on
    /// (more than [`BEHIND_PIECES`]) is rewritten inline after all, so fragmentation, and the
    /// extents it takes, stay bounded whatever the compactor's pace.
    pub(super) fn queue_crowded(&self, ino: u64, state: &mut FileState) {
        let mut windows = state.map.pending();
        windows.iter_mut().for_each(|o| *o /= WINDOW_BYTES);
        windows.dedup();
        for window in windows {
            if state
                .prepared
                .iter()
                .any(|p| p.from / WINDOW_BYTES == window)
            {
                continue;
            }
            if pieces_over(state, window, BEHIND_PIECES) {
                self.compactor.inline.fetch_add(1, Ordering::Relaxed);
                self.defragment_window(state, window);
            } else if crowded(state, window) {
                self.compactor.shared.push((ino, window));
            }
        }
    }

    /// Steps 1-3 of the module doc for one window, all in the caller: whether it was rewritten.
    fn compact_window(&self, ino: u64, window: u64) -> Result<bool> {
        let Ok(inode) = self.inode(ino) else {
            return Ok(false); // gone
        };
        let Some(file) = inode.file_state() else {
            return Ok(false);
        };
        let Some(plan) = self.prepare_window(file, window) else {
            return Ok(false);
        };
        let _locked = inode.data.lock();
        let mut state = file.lock();
        self.commit_if_unchanged(&inode, &mut state, plan)
    }

    /// Steps 1 and 2: the plan for a crowded window, its bytes copied to the new blocks and
    /// written back. Takes the file lock only to look at the window.
    fn prepare_window(&self, file: &parking_lot::Mutex<FileState>, window: u64) -> Option<Plan> {
        let (mut plan, goal) = {
            let mut state = file.lock();
            (self.plan_compaction(&mut state, window)?, state.goal)
        };
        // Blocks are found with no file lock held: a first fit of 16 contiguous blocks can scan
        // a long list of free runs, and the writer must not wait for it.
        plan.placement = self.whole_blocks(goal, plan.to - plan.from)?;
        let mut bytes = vec![0u8; (plan.to - plan.from) as usize];
        let base = self.image.geometry().block_offset(0);
        // Holes in the span read as zeros, as they did.
        for (offset, piece) in &plan.pieces {
            let (lo, hi) = ((*offset).max(plan.from), (offset + piece.len).min(plan.to));
            let dst = &mut bytes[(lo - plan.from) as usize..(hi - plan.from) as usize];
            self.image
                .region()
                .read_bytes(base + piece.addr + (lo - offset), dst);
        }
        self.store_data(&plan.placement, &bytes);
        // The copy's write-backs drain here, not inside a commit under the file's lock (a
        // fence waits for all of them: ~10 µs for 64 KiB here).
        self.image.region().fence();
        Some(plan)
    }

    /// Step 3 for a prepared plan: its own commit if the window's pieces are still the ones it
    /// copied (the caller holds the inode and file locks); else its blocks go back.
    fn commit_if_unchanged(
        &self,
        inode: &Inode,
        state: &mut FileState,
        plan: Plan,
    ) -> Result<bool> {
        let unchanged = !inode.removed.load(Ordering::Acquire)
            && !state.released
            && plan.is_whole()
            && window_pieces(state, plan.from, plan.to) == plan.pieces;
        if !unchanged {
            self.free_placement(&plan.placement);
            self.compactor.abandoned.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        match self.commit_compaction(inode, state, &plan) {
            Ok(()) => {
                self.compactor.compacted.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.free_placement(&plan.placement);
                self.compactor.abandoned.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The thread's turn at one window: steps 1 and 2, then the plan is handed to the file, so
    /// that its next commit (an fsync the writer makes anyway) takes the new piece along
    /// (`Fs::install_prepared`) and the writer never waits for a commit of the compactor's. A
    /// file that stays idle instead gets the compactor's own commit.
    pub fn prepare_for_next_commit(&self, ino: u64, window: u64) {
        let Ok(inode) = self.inode(ino) else {
            return;
        };
        let Some(file) = inode.file_state() else {
            return;
        };
        let Some(plan) = self.prepare_window(file, window) else {
            return;
        };
        {
            let mut state = file.lock();
            if state.released || window_pieces(&state, plan.from, plan.to) != plan.pieces {
                drop(state);
                self.free_placement(&plan.placement);
                self.compactor.abandoned.fetch_add(1, Ordering::Relaxed);
                return;
            }
            state.prepared.push(plan);
        }
        if !stays_idle(file) {
            return;
        }
        let _locked = inode.data.lock();
        let mut state = file.lock();
        let (whole, parts): (Vec<Plan>, Vec<Plan>) = std::mem::take(&mut state.prepared)
            .into_iter()
            .partition(Plan::is_whole);
        // A span that cuts a piece (or holds a pending one) waits for the file's next commit.
        state.prepared = parts;
        for plan in whole {
            let _ = self.commit_if_unchanged(&inode, &mut state, plan);
        }
    }

    /// A commit of the file's own (the caller holds its locks) takes the windows the compactor
    /// prepared whose pieces did not change since: each becomes one pending piece over the
    /// copied bytes, as an inline rewrite would leave it, without the copy.
    pub(super) fn install_prepared(&self, state: &mut FileState) {
        for plan in std::mem::take(&mut state.prepared) {
            if window_pieces(state, plan.from, plan.to) != plan.pieces {
                self.free_placement(&plan.placement);
                self.compactor.abandoned.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.put_pieces(state, plan.from, &plan.placement);
            state.dirty_bytes += plan.to - plan.from;
            self.compactor.compacted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Blocks of prepared windows that will never be installed (the file went).
    pub(super) fn drop_prepared(&self, state: &mut FileState) {
        for plan in std::mem::take(&mut state.prepared) {
            self.free_placement(&plan.placement);
        }
    }

    /// Step 1: the window's span and pieces, if it is crowded (blocks for the span are found
    /// after, by the caller, with no lock held).
    fn plan_compaction(&self, state: &mut FileState, window: u64) -> Option<Plan> {
        if state.released || !crowded(state, window) {
            return None;
        }
        // The span an inline rewrite takes (`Fs::defragment_window`).
        let (from, to) = super::commit::window_span(state, window)?;
        Some(Plan {
            pieces: window_pieces(state, from, to),
            from,
            to,
            placement: Placement::new(),
        })
    }

    /// `len` bytes in whole fresh blocks (none of them the file's tail); None when short.
    fn whole_blocks(&self, goal: Option<u64>, len: u64) -> Option<Placement> {
        let mut placement = Placement::new();
        let mut need = len;
        let mut goal = goal;
        while need > 0 {
            let want = need.div_ceil(BLOCK_SIZE).min(extent::MAX_BLOCKS);
            let Some((start, count)) = self.blocks.alloc_upto(goal, want) else {
                self.free_placement(&placement);
                return None;
            };
            goal = Some(start + count);
            let bytes = (count * BLOCK_SIZE).min(need);
            placement.push((start * BLOCK_SIZE, bytes));
            need -= bytes;
        }
        Some(placement)
    }

    fn free_placement(&self, placement: &Placement) {
        for &(addr, len) in placement {
            self.blocks
                .free(addr / BLOCK_SIZE, len.div_ceil(BLOCK_SIZE));
        }
    }

    /// Step 3: one file commit replacing the plan's extents by the placement's, nothing else.
    /// The caller holds the inode and file locks and checked that the pieces are unchanged.
    fn commit_compaction(&self, inode: &Inode, state: &mut FileState, plan: &Plan) -> Result<()> {
        let old: Vec<u32> = plan.pieces.iter().map(|(_, p)| p.eno).collect();
        // The replaced extents are consecutive in the media's list (checked, never assumed:
        // each links to the next), so the new ones take their place between `prev` and `next`.
        let first = self.image.extent(u64::from(old[0]));
        let last = self.image.extent(u64::from(*old.last().expect("crowded")));
        let chained = old
            .windows(2)
            .all(|w| self.image.extent(u64::from(w[0])).next.get() == w[1]);
        if !chained {
            return Err(Errno(libc::EAGAIN).into());
        }
        let (prev, next) = (first.prev.get(), last.next.get());
        let enos = self.alloc_extents(plan.placement.len())?;
        let mut new: Vec<(u32, Extent)> = Vec::with_capacity(enos.len());
        let mut at = plan.from;
        for (i, (&(addr, len), &eno)) in plan.placement.iter().zip(&enos).enumerate() {
            let link = |j: Option<usize>, outside: u32| j.map_or(outside, |j| enos[j]);
            let after = (i + 1 < enos.len()).then_some(i + 1);
            let (before, after) = (link(i.checked_sub(1), prev), link(after, next));
            new.push((
                eno,
                super::commit::extent_record(inode.ino, at, addr, len, before, after),
            ));
            at += len;
        }
        let media_head = self
            .image
            .pinode(u64::from(inode.primary_slot()))
            .extent_head
            .get();
        let head = if media_head == old[0] {
            enos[0]
        } else {
            media_head
        };
        let c = FileCommit {
            ino: inode.ino,
            slot: inode.primary_slot(),
            size: state.committed_size,
            mtime_ns: state.committed_mtime_ns,
            head,
            last: if next == 0 {
                *enos.last().expect("placed")
            } else {
                0
            },
            new: &new,
            removed: &old,
            moves: &[],
            data_fenced: plan.to - plan.from > CHECKSUM_DATA_MAX_BYTES,
        };
        let Some(overflow) = self.alloc_overflow(c.overflow_blocks_needed()) else {
            enos.iter().for_each(|&e| self.extents.free(e));
            return Err(Errno::ENOSPC.into());
        };
        // DRAM first, so the commit's `still_used` sees the file as it will be: the new pieces
        // in the map, the old ones out of it and out of the committed counts.
        let mut punched = Punched::default();
        state.changed();
        state.map.punch(plan.from, plan.to, &mut punched);
        debug_assert_eq!(punched.removed.len(), old.len());
        let mut at = plan.from;
        for (&(addr, len), &eno) in plan.placement.iter().zip(&enos) {
            let piece = Piece {
                addr,
                len,
                eno,
                fresh: false,
            };
            state.map.insert(at, piece);
            at += len;
        }
        for &(_, addr, len) in &punched.removed {
            state.committed_refs.remove(addr, len);
        }
        for &(addr, len) in &plan.placement {
            state.committed_refs.add(addr, len);
        }
        // The bitmap follows the committed extents only: a block a pending piece shares with a
        // replaced extent is not on the media's books until that piece commits (and sets it).
        state.recent_write = None;
        let mark = self.commit_through_log(state.last_commit, &overflow, &c, &|b| {
            state.committed_refs.touched(b)
        });
        state.last_commit = mark;
        // The old pieces' blocks that nothing holds now are free.
        let tail = state.tail_block();
        let mut blocks: SmallVec<[u64; 8]> = SmallVec::new();
        for &(_, addr, len) in &punched.removed {
            blocks.extend(
                (addr / BLOCK_SIZE..(addr + len).div_ceil(BLOCK_SIZE)).filter(|&b| {
                    !state.map.refs().touched(b)
                        && !state.committed_refs.touched(b)
                        && tail != Some(b)
                        && !state.deferred.contains(&b)
                }),
            );
        }
        blocks.extend_from_slice(&overflow);
        self.hold_for_commit(state.last_commit, old.iter().copied(), blocks);
        Ok(())
    }
}

/// How long a file must see no write before the compactor takes its lock.
const IDLE: std::time::Duration = std::time::Duration::from_micros(100);

/// Whether `inode` sees no write for [`IDLE`] (the compactor yields to foreground work on the
/// file: its lock, held for a rewrite's commit, would stall a writer, and a parked writer wakes
/// tens of µs late).
fn stays_idle(file: &parking_lot::Mutex<FileState>) -> bool {
    let writes = || file.try_lock().map(|state| state.writes);
    let Some(seen) = writes() else {
        return false;
    };
    std::thread::sleep(IDLE);
    writes() == Some(seen)
}

/// Pieces in one window past which a commit rewrites it inline although the compactor runs.
pub(crate) const BEHIND_PIECES: usize = 2 * WINDOW_MAX_PIECES;

/// The pieces overlapping `[from, to)`.
fn window_pieces(state: &FileState, from: u64, to: u64) -> Vec<(u64, Piece)> {
    state.map.overlapping(from, to).collect()
}

fn compactor_loop(fs: &Weak<Fs>, shared: &Shared) {
    // Yield to foreground work where the two share a CPU.
    let _ = rustix::process::setpriority_process(None, 10);
    let allowed = rustix::thread::sched_getaffinity(None).ok();
    let mut avoiding = 0;
    while let Some((ino, window)) = shared.wait() {
        let queuer = shared.queuer_cpu.load(Ordering::Relaxed);
        if queuer != avoiding {
            if let Some(allowed) = &allowed {
                keep_off_cpu(allowed, (queuer - 1) as usize);
            }
            avoiding = queuer;
        }
        // A strong reference only while a window is looked at.
        let Some(fs) = fs.upgrade() else {
            return;
        };
        fs.prepare_for_next_commit(ino, window);
    }
}

/// Lets the calling thread run on every CPU of `allowed` but `cpu`, if that leaves any. Without
/// it the scheduler tends to wake the compactor on the CPU of the commit that woke it, where it
/// then holds the file's lock while the committing thread waits for the CPU.
fn keep_off_cpu(allowed: &rustix::thread::CpuSet, cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    let mut any = false;
    for c in (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| c != cpu) {
        if allowed.is_set(c) {
            set.set(c);
            any = true;
        }
    }
    if any {
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::fs::Fs;
    use crate::namespace::tests::{fresh, Harness, OWNER};
    use crate::namespace::ROOT_INO;

    /// 40 small writes in window 0 of a new file, committed in one fsync: a crowded window.
    fn crowded_file(fs: &Fs) -> (u64, Vec<u8>) {
        let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        let mut model = vec![0u8; 1500 * 40];
        for i in 0..40u64 {
            let data = [i as u8 + 1; 100];
            fs.write(f.ino, i * 1500, &data).unwrap();
            model[(i * 1500) as usize..(i * 1500 + 100) as usize].copy_from_slice(&data);
        }
        model.truncate(39 * 1500 + 100);
        fs.fsync(f.ino).unwrap();
        (f.ino, model)
    }

    fn contents(fs: &Fs, ino: u64) -> Vec<u8> {
        let mut buf = vec![0u8; fs.getattr(ino).unwrap().size as usize];
        fs.read(ino, 0, &mut buf).unwrap();
        buf
    }

    fn runs(fs: &Fs, ino: u64) -> usize {
        fs.data_map(ino, 0, u64::MAX, 1000).unwrap().len()
    }

    #[test]
    fn a_queued_window_is_rewritten_by_its_own_commit() {
        let mut h = fresh(None);
        let fs = h.fs();
        fs.set_deferred_compaction(true);
        let (ino, model) = crowded_file(fs);
        assert_eq!(fs.compaction_stats().queued, 1);
        assert_eq!(runs(fs, ino), 40, "the commit left the window as it was");
        let mtime = fs.getattr(ino).unwrap().mtime_ns;
        assert_eq!(fs.compact_queued().unwrap(), 1);
        assert_eq!(runs(fs, ino), 1);
        assert_eq!(contents(fs, ino), model);
        assert_eq!(
            fs.getattr(ino).unwrap().mtime_ns,
            mtime,
            "nothing a reader sees"
        );
        h.remount(false);
        assert_eq!(contents(h.fs(), ino), model);
        assert_eq!(runs(h.fs(), ino), 1, "durable");
    }

    #[test]
    fn pending_writes_stay_out_of_the_compaction_commit() {
        let mut h = fresh(None);
        let fs = h.fs();
        fs.set_deferred_compaction(true);
        let (ino, model) = crowded_file(fs);
        // Pending, not fsynced: a write in another window and one that grows the file.
        fs.write(ino, 200_000, b"pending").unwrap();
        assert_eq!(fs.compact_queued().unwrap(), 1);
        let mut live = model.clone();
        live.resize(200_000, 0);
        live.extend_from_slice(b"pending");
        assert_eq!(contents(h.fs(), ino), live);
        // A crash loses the pending write and keeps the compaction.
        h.remount(false);
        assert_eq!(contents(h.fs(), ino), model);
        assert_eq!(runs(h.fs(), ino), 1);
    }

    #[test]
    fn a_window_with_a_pending_piece_is_left_to_the_next_commit() {
        let h = fresh(None);
        let fs = h.fs();
        fs.set_deferred_compaction(true);
        let (ino, _) = crowded_file(fs);
        fs.write(ino, 50, b"x").unwrap();
        assert_eq!(fs.compact_queued().unwrap(), 0);
        fs.fsync(ino).unwrap();
        assert_eq!(
            fs.compact_queued().unwrap(),
            1,
            "queued again by the commit"
        );
    }

    #[test]
    fn a_prepared_window_is_taken_along_by_the_file_s_next_commit() {
        let mut h = fresh(None);
        let fs = h.fs();
        fs.set_deferred_compaction(true);
        let (ino, mut model) = crowded_file(fs);
        // A pending write inside the window: the compactor's own commit cannot take the span
        // (it would make the write durable), so the copy waits for the file's next commit.
        fs.write(ino, 50, b"x").unwrap();
        model[50] = b'x';
        assert!(runs(fs, ino) > 32, "deferred: the window is still crowded");
        fs.prepare_for_next_commit(ino, 0);
        assert_eq!(
            fs.compaction_stats().compacted,
            0,
            "not committed by the compactor"
        );
        assert_eq!(contents(fs, ino), model);
        fs.fsync(ino).unwrap();
        assert_eq!(fs.compaction_stats().compacted, 1);
        assert_eq!(runs(fs, ino), 1);
        assert_eq!(contents(fs, ino), model);
        h.remount(false);
        assert_eq!(contents(h.fs(), ino), model);
    }

    #[test]
    fn a_prepared_window_that_changed_is_dropped() {
        let h = fresh(None);
        let fs = h.fs();
        fs.set_deferred_compaction(true);
        let (ino, mut model) = crowded_file(fs);
        fs.write(ino, 50, b"x").unwrap();
        fs.prepare_for_next_commit(ino, 0);
        fs.write(ino, 3000, b"yy").unwrap(); // after the copy: the copy is stale
        model[50] = b'x';
        model[3000..3002].copy_from_slice(b"yy");
        let free = fs.free_data_blocks();
        fs.fsync(ino).unwrap();
        assert_eq!(fs.compaction_stats().abandoned, 1);
        assert_eq!(contents(fs, ino), model, "the stale copy was not installed");
        assert!(fs.free_data_blocks() > free, "its blocks went back");
    }

    #[test]
    fn without_the_compactor_commits_rewrite_inline() {
        let h = fresh(None);
        let fs = h.fs();
        let (ino, model) = crowded_file(fs);
        assert_eq!(runs(fs, ino), 1);
        assert_eq!(fs.compaction_stats().queued, 0);
        assert_eq!(contents(fs, ino), model);
    }

    #[test]
    fn the_thread_compacts_while_a_writer_overwrites() {
        let mut h = fresh(None);
        let fs = Arc::new(h.fs.take().unwrap());
        Fs::start_compactor(&fs).unwrap();
        let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        let size = 256 << 10;
        fs.write(f.ino, 0, &vec![0u8; size]).unwrap();
        fs.fsync(f.ino).unwrap();
        let mut model = vec![0u8; size];
        let mut seed = 7u64;
        for i in 0..4000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (seed >> 33) as usize % (size - 300);
            let len = 1 + (seed >> 20) as usize % 300;
            let data = vec![(i % 251) as u8; len];
            fs.write(f.ino, at as u64, &data).unwrap();
            model[at..at + len].copy_from_slice(&data);
            fs.fsync(f.ino).unwrap_or_else(|e| panic!("fsync {i}: {e}"));
            if i % 500 == 0 {
                assert_eq!(contents(&fs, f.ino), model, "after {i} overwrites");
            }
        }
        // Let the queue drain, then stop.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs.compaction_stats().queued > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        fs.stop_compactor();
        let stats = fs.compaction_stats();
        assert!(stats.compacted > 0, "{stats:?}");
        assert_eq!(contents(&fs, f.ino), model);
        h.fs = Some(Arc::try_unwrap(fs).expect("the thread let go"));
        h.remount(false);
        assert_eq!(contents(h.fs(), f.ino), model);
        let _: &Harness = &h;
    }
}
