//! Mapped files with an atomic msync that copies only the pages a program dirtied (seed 001,
//! III-D "Memory-mapped I/O").
//!
//! **The shadow.** A regular file mapped in this process gets one *shadow*: a memfd holding the
//! file's bytes, made at the first [`Fs::map`] of the inode. Every mapping of the inode in the
//! process maps that memfd, so all of them see each other's stores at once (`MAP_SHARED` within
//! the process), and while the shadow exists [`Fs::read`], [`Fs::write`] and [`Fs::truncate`] read
//! and update it as the kernel's page cache would. A `MAP_PRIVATE` mapping maps the memfd private
//! copy-on-write: its stores never reach the file.
//!
//! **Dirty pages.** Each shared mapping is write-protected asynchronously with userfaultfd
//! (`UFFD_FEATURE_WP_ASYNC`): the first store to a page costs the kernel ~1-2 us and marks it
//! written, with no message to us; `PAGEMAP_SCAN` lists the written pages and protects them again
//! in one call (~30-40 us for a clean 64 MiB mapping, measured in shared/research/preload.md §4).
//! A new view protects only the pages that hold data: protecting a page that is not there
//! costs a page-table entry that every scan walks (a 2 GiB LMDB map of 30 MiB of data: 0.5 ms
//! per scan), while a page left bare gets its entry only when touched, and the scan reports it
//! then; a hole that was only read, and still reads as zeros, is dropped. A sync therefore walks
//! what the file holds and what was touched, not the mapping.
//! Where the kernel cannot (before 6.7), the fallback compares the shadow with the file's data at
//! each sync: no cost per store, O(file size) per sync. [`Fs::write_tracking`] says which.
//!
//! **msync, fsync, fdatasync** of a mapped file take the written pages, write them into the file
//! through the ordinary data path (Non-Copy-On-Write: each page's bytes go to fresh space, the
//! unmodified pages are not copied), then commit the file: one file-journal transaction, so the
//! pages dirtied since the last sync become durable as one atomic unit, with whatever `write`
//! put there too. msync of a range commits the file's every dirty page (a superset is still one
//! atomic unit); MS_ASYNC is the same as MS_SYNC (a commit is a few microseconds).
//!
//! **Decided:** dropping a [`Mapping`] (munmap) keeps its unsynced stores: they wait in the
//! shadow for the next fsync, msync or unmount, as written-but-unsynced `write` data does. A
//! truncate resizes the memfd, so a store past the new end gets SIGBUS as on the kernel's files.
//! Tracking is per process: a forked child's stores to a shared mapping are not seen by the
//! parent's scan (page tables are per process), so a child must not expect them synced.
//!
//! Here: shadows and mappings; `sync` finds the written pages and moves them into the data path.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

mod sync;

pub(super) use sync::{data_pages, extend_reach};

use super::mmap_sys::{View, WriteTracker, PAGE_BYTES};
use crate::error::{Errno, Error, Result};
use crate::fs::Fs;
use crate::inode::Inode;

/// The shadows of this process's mapped files.
#[derive(Debug, Default)]
pub(crate) struct Shadows {
    by_ino: Mutex<HashMap<u64, Arc<Shadow>>>,
    /// `by_ino.len()`, read without the lock: the read and write paths pay one load when no
    /// file is mapped.
    live: AtomicUsize,
    /// The kernel's write tracking, tried at the first shared mapping (`None`: the fallback).
    tracker: OnceLock<Option<Arc<WriteTracker>>>,
    /// Use the fallback even where the kernel could track ([`MountOptions::compare_mapped_pages`]).
    ///
    /// [`MountOptions::compare_mapped_pages`]: crate::fs::MountOptions::compare_mapped_pages
    compare_only: bool,
    /// Every page of a mapped file is written at every sync ([`MountOptions::msync_whole_file`]).
    ///
    /// [`MountOptions::msync_whole_file`]: crate::fs::MountOptions::msync_whole_file
    whole_file: bool,
}

/// One mapped file's bytes in this process.
#[derive(Debug)]
pub(super) struct Shadow {
    pub(super) memfd: OwnedFd,
    tracker: Option<Arc<WriteTracker>>,
    pub(super) state: Mutex<ShadowState>,
}

impl Shadow {
    /// Starts tracking the written pages of `view` (at `offset` in the file): all of it when
    /// views are populated, else only the pages that hold data (see `track_ranges`).
    fn track(&self, view: &View, offset: u64, populated: bool) -> Result<()> {
        let Some(tracker) = &self.tracker else {
            return Ok(());
        };
        if populated {
            tracker.track(view).map_err(io_error)
        } else {
            let data = data_pages(self.memfd.as_fd(), offset, view.len()).map_err(io_error)?;
            tracker.track_ranges(view, &data).map_err(io_error)
        }
    }
}

/// A shared view of the shadow that the program made.
#[derive(Debug)]
struct SharedView {
    id: u64,
    view: Arc<View>,
    /// Offset of the view in the file.
    offset: u64,
    /// Whether its written pages are tracked: from the start for a writable mapping; a
    /// read-only one (LMDB's default) cannot be stored to, so it costs no scan until the
    /// program makes it writable ([`Fs::make_writable`]).
    tracked: bool,
}

#[derive(Debug)]
pub(super) struct ShadowState {
    /// The file's size.
    pub(super) size: u64,
    /// The core's own view of the whole memfd (not tracked: what the core copies in is already
    /// in the file's data path).
    view: View,
    /// The program's shared views.
    shared: Vec<SharedView>,
    next_id: u64,
    /// Pages written through views since unmapped, or reported by a process the shadow is lent
    /// to ([`Fs::lend_shadow`]), not yet synced.
    pub(super) orphaned_pages: BTreeSet<u64>,
    /// No page of the memfd at or past this offset holds data, as last found ([`extend_reach`];
    /// 0 until a scan first asks). A store through a view allocates its page in the memfd, so a
    /// scan for written pages need not go past it.
    reach: u64,
}

/// How [`Fs::map_with`] maps.
#[derive(Debug, Clone, Copy)]
pub struct MapRequest {
    /// `MAP_SHARED` (stores reach the file at the next sync) or `MAP_PRIVATE`.
    pub shared: bool,
    /// `PROT_*` bits.
    pub prot: i32,
    /// Where, for `MAP_FIXED` and `MAP_FIXED_NOREPLACE`; `None`: where the kernel chooses.
    pub at: Option<MapAt>,
}

/// A fixed address for [`MapRequest`].
#[derive(Debug, Clone, Copy)]
pub struct MapAt {
    /// The first byte.
    pub addr: usize,
    /// `MAP_FIXED` (replace what is there) rather than `MAP_FIXED_NOREPLACE`.
    pub replace: bool,
}

/// A mapping of part of a regular file, unmapped on drop (see the module's notes).
#[derive(Debug)]
pub struct Mapping {
    ino: u64,
    /// The file offset of the mapping's first byte.
    offset: u64,
    shadow: Arc<Shadow>,
    view: Arc<View>,
    /// Id among the shadow's shared views; `None` for a private mapping.
    id: Option<u64>,
}

impl Mapping {
    /// Whether the mapping is shared (its stores reach the file at a sync).
    pub fn is_shared(&self) -> bool {
        self.id.is_some()
    }

    /// The inode mapped.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The mapping's first byte, for a program that stores through it directly.
    pub fn addr(&self) -> usize {
        self.view.addr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.view.len()
    }

    /// Whether the mapping is empty (never: a mapping has at least one page).
    pub fn is_empty(&self) -> bool {
        self.view.len() == 0
    }

    /// Stores `data` at `at` in the mapping, as a program's stores would.
    pub fn store(&self, at: usize, data: &[u8]) {
        self.view.write(at, data);
    }

    /// Loads bytes at `at` of the mapping.
    pub fn load(&self, at: usize, out: &mut [u8]) {
        self.view.read(at, out);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        let mut state = self.shadow.state.lock();
        let (offset, tracked) = state
            .shared
            .iter()
            .find(|s| s.id == id)
            .map(|s| (s.offset, s.tracked))
            .expect("a live mapping is registered");
        let mut written = Vec::new();
        if let Some(tracker) = self.shadow.tracker.as_ref().filter(|_| tracked) {
            // A failed scan loses nothing: the fallback below treats the whole view as written.
            if tracker.take_written(&self.view, &mut written).is_err() {
                written.push((0, self.view.len()));
            }
            tracker.untrack(&self.view);
        }
        for (at, len) in written {
            let first = (offset + at as u64) / PAGE_BYTES;
            let count = (len as u64).div_ceil(PAGE_BYTES);
            state.orphaned_pages.extend(first..first + count);
        }
        state.shared.retain(|s| s.id != id);
    }
}

const TRACKED: &str = "userfaultfd write-protect + PAGEMAP_SCAN (mappings populated first)";
const TRACKED_UNPOPULATED: &str =
    "userfaultfd write-protect + PAGEMAP_SCAN (pages tracked before they are touched)";
const COMPARED: &str =
    "compare at sync (this kernel has no userfaultfd WP_ASYNC with PAGEMAP_SCAN)";

/// How a mount on this machine would find the pages written through shared mappings
/// ([`Fs::write_tracking`]), tried now (`nosefs info` says it).
pub fn write_tracking_here() -> &'static str {
    match WriteTracker::new() {
        Ok(t) if t.tracks_unpopulated() => TRACKED_UNPOPULATED,
        Ok(_) => TRACKED,
        Err(_) => COMPARED,
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::io("mapping a file", e)
}

impl Fs {
    /// Maps `len` bytes (rounded up to whole pages) of regular file `ino` from `offset` (a
    /// multiple of 4096): shared (stores
    /// reach the file at the next msync or fsync) or private (copy-on-write, never the file's).
    /// Pages past the end of the file may be mapped; touching them is SIGBUS, as on the kernel's
    /// files.
    pub fn map(&self, ino: u64, offset: u64, len: usize, shared: bool) -> Result<Mapping> {
        let request = MapRequest {
            shared,
            prot: libc::PROT_READ | libc::PROT_WRITE,
            at: None,
        };
        self.map_with(ino, offset, len, &request)
    }

    /// [`Fs::map`] with a program's protection and placement (the shim's `mmap`).
    pub fn map_with(
        &self,
        ino: u64,
        offset: u64,
        len: usize,
        request: &MapRequest,
    ) -> Result<Mapping> {
        let shared = request.shared;
        if len == 0 || offset % PAGE_BYTES != 0 {
            return Err(Errno::EINVAL.into());
        }
        // Whole pages, as mmap(2) rounds a length up.
        let len = (len as u64)
            .checked_next_multiple_of(PAGE_BYTES)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(Errno(libc::ENOMEM))?;
        if shared && request.prot & libc::PROT_WRITE != 0 {
            self.writable()?;
        }
        let inode = self.inode(ino)?;
        if !inode.is_file() {
            return Err(Errno(libc::ENODEV).into());
        }
        let shadow = self.shadow_or_make(&inode)?;
        // A shared view is populated only where write tracking needs its pages present: a
        // sparse file's holes then cost no memory until touched, as with the kernel's mmap.
        let populate = shared
            && shadow
                .tracker
                .as_ref()
                .is_some_and(|t| !t.tracks_unpopulated());
        let view = View::map_placed(
            shadow.memfd.as_fd(),
            offset,
            len,
            shared,
            request.prot,
            request.at.map(|at| (at.addr, at.replace)),
            populate,
        )
        .map_err(|e| match e.raw_os_error() {
            // What the kernel said about the placement or the protection is the program's answer.
            Some(code) => Error::Errno(Errno(code)),
            None => io_error(e),
        })?;
        let view = Arc::new(view);
        let id = if shared {
            let tracked = request.prot & libc::PROT_WRITE != 0;
            if tracked {
                shadow.track(&view, offset, populate)?;
            }
            let mut state = shadow.state.lock();
            let id = state.next_id;
            state.next_id += 1;
            state.shared.push(SharedView {
                id,
                view: Arc::clone(&view),
                offset,
                tracked,
            });
            Some(id)
        } else {
            None
        };
        Ok(Mapping {
            ino,
            offset,
            shadow,
            view,
            id,
        })
    }

    /// The program is about to make `mapping` writable (mprotect): from now on its stores are
    /// tracked like those of a mapping made writable. Call it before the protection changes,
    /// so that no store can land untracked. A private mapping, or one already tracked, needs
    /// nothing.
    pub fn make_writable(&self, mapping: &Mapping) -> Result<()> {
        let Some(id) = mapping.id else {
            return Ok(());
        };
        self.writable()?;
        let shadow = &mapping.shadow;
        let mut state = shadow.state.lock();
        let Some(entry) = state.shared.iter_mut().find(|s| s.id == id) else {
            return Ok(());
        };
        if entry.tracked {
            return Ok(());
        }
        // Tracking a view that was read from: its present pages are protected where they hold
        // data; a hole page read before is reported once and dropped while it reads as zeros.
        let populated = shadow
            .tracker
            .as_ref()
            .is_some_and(|t| !t.tracks_unpopulated());
        shadow.track(&entry.view, entry.offset, populated)?;
        entry.tracked = true;
        Ok(())
    }

    /// `mremap` with MREMAP_MAYMOVE: a new mapping of the same file range, `len` bytes long,
    /// where the kernel places it, with protection `prot` (the old mapping's). A shared one sees
    /// every store made through `mapping` at once (both view the file's shadow); a private one
    /// gets a copy of `mapping`'s bytes up to the file's end. `mapping` stays: the caller drops
    /// it once the new one is in place, which keeps its written pages for the next sync, so a
    /// failure here leaves the program's mapping as it was.
    pub fn remap(&self, mapping: &Mapping, len: usize, prot: i32) -> Result<Mapping> {
        let request = MapRequest {
            shared: mapping.id.is_some(),
            prot,
            at: None,
        };
        let fresh = self.map_with(mapping.ino, mapping.offset, len, &request)?;
        if mapping.id.is_none() && prot & libc::PROT_READ != 0 && prot & libc::PROT_WRITE != 0 {
            // Pages past the file's end fault: copy what the file holds of the range.
            let size = self.getattr(mapping.ino)?.size;
            let in_file = size
                .saturating_sub(mapping.offset)
                .next_multiple_of(PAGE_BYTES);
            let n = (mapping.len().min(fresh.len()) as u64).min(in_file) as usize;
            let mut bytes = vec![0u8; n];
            mapping.load(0, &mut bytes);
            fresh.store(0, &bytes);
        }
        Ok(fresh)
    }

    /// Makes the stores to `mapping` (and every other change to its file) durable, atomically:
    /// msync(MS_SYNC) of the whole mapping. See the module's notes.
    pub fn msync(&self, mapping: &Mapping) -> Result<()> {
        self.msync_range(mapping, 0, mapping.len())
    }

    /// msync(MS_SYNC) of `len` bytes of `mapping` from `at`: the pages of that part of the file
    /// written through any of its mappings, with the file's pending writes, become durable as
    /// one unit. Only that part is scanned, so the cost follows the range, not the file.
    pub fn msync_range(&self, mapping: &Mapping, at: usize, len: usize) -> Result<()> {
        if at > mapping.len() {
            return Err(Errno(libc::ENOMEM).into());
        }
        let first = mapping.offset + (at as u64 / PAGE_BYTES) * PAGE_BYTES;
        let end = mapping.offset + (at + len).min(mapping.len()) as u64;
        let inode = self.inode(mapping.ino)?;
        self.take_mapped_writes(&inode, Some((first, end)))?;
        self.commit_inode(&inode)
    }

    /// How written pages of shared mappings are found: "userfaultfd write-protect + PAGEMAP_SCAN"
    /// or the fallback "compare at sync". Decided at the first shared mapping; before it, what
    /// would be chosen.
    pub fn write_tracking(&self) -> &'static str {
        match self.shadows.tracker() {
            Some(_) => TRACKED,
            None => COMPARED,
        }
    }

    pub(super) fn shadow_or_make(&self, inode: &Inode) -> Result<Arc<Shadow>> {
        let mut by_ino = self.shadows.by_ino.lock();
        if let Some(shadow) = by_ino.get(&inode.ino) {
            return Ok(Arc::clone(shadow));
        }
        let file = self.file_of(inode)?;
        let mut state = file.lock();
        let size = state.size;
        let memfd = rustix::fs::memfd_create(
            format!("nosefs:{}", inode.ino),
            rustix::fs::MemfdFlags::CLOEXEC,
        )
        .map_err(|e| io_error(e.into()))?;
        let capacity = size.div_ceil(PAGE_BYTES).max(1) * PAGE_BYTES;
        rustix::fs::ftruncate(&memfd, size).map_err(|e| io_error(e.into()))?;
        let view = View::map_lazily(memfd.as_fd(), capacity as usize).map_err(io_error)?;
        // Only the file's pieces are copied: the memfd reads as zeros wherever nothing is
        // written, so a hole costs neither time nor memory (a sparse 6 GiB file with a page at
        // its end maps as fast as a small one).
        let mut chunk = vec![0u8; 1 << 20];
        let pieces: Vec<(u64, u64)> = state
            .map
            .overlapping(0, size)
            .map(|(offset, piece)| (offset, (offset + piece.len).min(size)))
            .collect();
        for (start, end) in pieces {
            let mut at = start;
            while at < end {
                let want = ((end - at) as usize).min(chunk.len());
                let n = self.read_locked(&state, at, &mut chunk[..want]);
                // Written through the memfd, not the view: the kernel allocates the pages as it
                // copies, with no page fault per page.
                write_all_at(&memfd, &chunk[..n], at)?;
                at += n as u64;
            }
        }
        let shadow = Arc::new(Shadow {
            memfd,
            tracker: self.shadows.tracker(),
            state: Mutex::new(ShadowState {
                size,
                view,
                shared: Vec::new(),
                next_id: 0,
                orphaned_pages: BTreeSet::new(),
                reach: 0,
            }),
        });
        by_ino.insert(inode.ino, Arc::clone(&shadow));
        self.shadows.live.store(by_ino.len(), Ordering::Release);
        // Reads of the file's bytes from the image would miss the stores into the shadow: a
        // reader that copied them ([`crate::file::direct`]) asks again, and is refused.
        state.changed();
        Ok(shadow)
    }

    /// Whether file `ino` has a shadow (a mapping made it, and it was not dropped yet).
    pub(super) fn shadow_exists(&self, ino: u64) -> bool {
        self.shadow_of(ino).is_some()
    }

    fn shadow_of(&self, ino: u64) -> Option<Arc<Shadow>> {
        if self.shadows.live.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.shadows.by_ino.lock().get(&ino).cloned()
    }

    /// `read` of a mapped file: from its shadow, which holds the program's stores too.
    pub(super) fn read_shadowed(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Option<usize> {
        let shadow = self.shadow_of(ino)?;
        let state = shadow.state.lock();
        if offset >= state.size {
            return Some(0);
        }
        let n = (state.size - offset).min(buf.len() as u64) as usize;
        state.view.read(offset as usize, &mut buf[..n]);
        Some(n)
    }

    /// `write` of a mapped file: the bytes went to the file's data path; the shadow gets them too.
    pub(crate) fn write_shadowed(&self, ino: u64, offset: u64, data: &[u8]) -> Result<()> {
        let Some(shadow) = self.shadow_of(ino) else {
            return Ok(());
        };
        let mut state = shadow.state.lock();
        let end = offset + data.len() as u64;
        if end > state.size {
            shadow.resize(&mut state, end)?;
        }
        state.view.write(offset as usize, data);
        Ok(())
    }

    /// `truncate` of a mapped file: the memfd takes the new size (stores past it: SIGBUS).
    pub(super) fn truncate_shadowed(&self, ino: u64, size: u64) -> Result<()> {
        let Some(shadow) = self.shadow_of(ino) else {
            return Ok(());
        };
        let mut state = shadow.state.lock();
        shadow.resize(&mut state, size)?;
        let first_gone = size.div_ceil(PAGE_BYTES);
        state.orphaned_pages.retain(|&p| p < first_gone);
        Ok(())
    }
}

impl Shadow {
    /// Gives the memfd (and the core's view) `size` bytes.
    fn resize(&self, state: &mut ShadowState, size: u64) -> Result<()> {
        rustix::fs::ftruncate(&self.memfd, size).map_err(|e| io_error(e.into()))?;
        if size > state.view.len() as u64 {
            let capacity =
                (size.div_ceil(PAGE_BYTES) * PAGE_BYTES).max(2 * state.view.len() as u64);
            state.view =
                View::map_lazily(self.memfd.as_fd(), capacity as usize).map_err(io_error)?;
        }
        state.size = size;
        Ok(())
    }
}

impl Shadows {
    /// No shadows yet; `compare_only` forces the fallback, `whole_file` the ablation.
    pub(crate) fn new(compare_only: bool, whole_file: bool) -> Shadows {
        Shadows {
            compare_only,
            whole_file,
            ..Shadows::default()
        }
    }

    fn tracker(&self) -> Option<Arc<WriteTracker>> {
        self.tracker
            .get_or_init(|| {
                if self.compare_only {
                    return None;
                }
                WriteTracker::new().ok().map(Arc::new)
            })
            .clone()
    }
}

/// `data` written into `memfd` at `offset`, whole.
fn write_all_at(memfd: &OwnedFd, mut data: &[u8], mut offset: u64) -> Result<()> {
    while !data.is_empty() {
        let n = rustix::io::pwrite(memfd, data, offset).map_err(|e| io_error(e.into()))?;
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}
