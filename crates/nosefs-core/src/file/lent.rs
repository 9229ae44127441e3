//! A mapped file's shadow lent to other processes: the daemon's clients map the file's memfd
//! themselves instead of going through the kernel's FUSE mount.
//!
//! **Lending** (the process holding the file system, [`Fs::lend_shadow`]): a [`LentShadow`]
//! keeps file `ino`'s shadow (`mmap`) alive and gives a descriptor of its memfd, read-only
//! unless the borrower may write the file. While the shadow lives, every read, write and
//! truncate of the file by anyone goes through it, exactly as for the process's own mappings,
//! so the borrower's mapping sees every write at once and every reader sees the borrower's
//! stores at once, as with the kernel's page cache.
//!
//! **Borrowing** (the other process, [`BorrowedMapping`]): the borrower maps the memfd and
//! tracks its own stores with the same userfaultfd write-protection as `mmap` (page tables are
//! per process, so only it can find them). At msync, fsync or munmap it reports the pages it
//! wrote ([`BorrowedMapping::take_written`]) and the lender writes them into the file's data
//! path ([`Fs::take_lent_writes`]): the next commit makes them durable as one unit, with
//! Non-Copy-On-Write (only those pages are written).
//!
//! **A borrower that ends without reporting** (killed, or crashed): the lender cannot know which
//! pages it wrote, so [`Fs::return_shadow`] compares the shadow with the file and takes every
//! page that differs: nothing the borrower stored is lost, as with the kernel, whose page cache
//! keeps a dead process's stores.
//!
//! Decided: an fsync by one process commits the stores other borrowers have reported, not the
//! ones they have not (tracking is per process), as a forked child's stores in `mmap`.

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::mmap::{data_pages, extend_reach, MapRequest, Shadow};
use super::mmap_sys::{View, WriteTracker, PAGE_BYTES};
use crate::error::{Errno, Error, Result};
use crate::fs::Fs;

/// A hold on a file's shadow by another process ([`Fs::lend_shadow`]); give it back with
/// [`Fs::return_shadow`].
#[derive(Debug)]
pub struct LentShadow {
    ino: u64,
    shadow: Arc<Shadow>,
    writable: bool,
}

impl LentShadow {
    /// The file.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Whether the borrower may store to the file (and report pages).
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// A new descriptor of the shadow's memfd for the borrower: opened read-only unless the
    /// borrower may write, so a reader cannot store to the file's bytes.
    pub fn memfd(&self) -> Result<OwnedFd> {
        if self.writable {
            return rustix::io::fcntl_dupfd_cloexec(&self.shadow.memfd, 0)
                .map_err(|e| io_error(e.into()));
        }
        let path = format!("/proc/self/fd/{}", self.shadow.memfd.as_raw_fd());
        rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io_error(e.into()))
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::io("lending a mapped file", e)
}

impl Fs {
    /// Lends regular file `ino`'s shadow (made if it has none) to a process that maps it
    /// itself; `writable`: it may store to the file (a shared mapping of a description open
    /// for writing). See the module's notes.
    pub fn lend_shadow(&self, ino: u64, writable: bool) -> Result<LentShadow> {
        if writable {
            self.writable()?;
        }
        let inode = self.inode(ino)?;
        if !inode.is_file() {
            return Err(Errno(libc::ENODEV).into());
        }
        let shadow = self.shadow_or_make(&inode)?;
        Ok(LentShadow {
            ino,
            shadow,
            writable,
        })
    }

    /// The borrower of `lent` wrote these pages of the file ((first page, pages) runs): they
    /// join the file's pending writes, for its next commit. Pages past the file's end are
    /// ignored (the borrower's stores there faulted). EBADF for a read-only loan.
    pub fn take_lent_writes(&self, lent: &LentShadow, runs: &[(u64, u64)]) -> Result<()> {
        if runs.is_empty() {
            return Ok(());
        }
        if !lent.writable {
            return Err(Errno::EBADF.into());
        }
        let inode = self.inode(lent.ino)?;
        {
            let mut state = lent.shadow.state.lock();
            let pages_in_file = state.size.div_ceil(PAGE_BYTES);
            for &(first, count) in runs {
                let end = first.saturating_add(count).min(pages_in_file);
                state.orphaned_pages.extend(first.min(end)..end);
            }
        }
        self.take_mapped_writes(&inode, None)
    }

    /// Ends a loan. `reported`: the borrower said what it wrote (its last pages went through
    /// [`Fs::take_lent_writes`]); `false` (it ended without a word): every page of the shadow
    /// that differs from the file is taken as written. The shadow goes with its last user.
    pub fn return_shadow(&self, lent: LentShadow, reported: bool) -> Result<()> {
        let inode = self.inode(lent.ino)?;
        if !reported && lent.writable {
            let mut state = lent.shadow.state.lock();
            let mut pages = BTreeSet::new();
            self.differing_pages(&inode, &state, 0, u64::MAX, &mut pages)?;
            state.orphaned_pages.extend(pages);
        }
        drop(lent);
        // Writes the orphaned pages into the data path and drops a shadow no one uses.
        self.take_mapped_writes(&inode, None)
    }
}

/// This process's tracker of stores to borrowed mappings, with the process it was made in (a
/// forked child makes its own: the parent's reads the parent's page tables).
static TRACKER: Mutex<Option<(u32, Option<Arc<WriteTracker>>)>> = Mutex::new(None);

fn tracker() -> Option<Arc<WriteTracker>> {
    let pid = std::process::id();
    let mut slot = TRACKER.lock();
    match &*slot {
        Some((made_in, tracker)) if *made_in == pid => tracker.clone(),
        _ => {
            let tracker = WriteTracker::new().ok().map(Arc::new);
            *slot = Some((pid, tracker.clone()));
            tracker
        }
    }
}

/// A shared mapping of a lent shadow's memfd in the borrowing process, its stores tracked
/// (see the module's notes). Unmapped on drop; report its written pages first. The memfd is the
/// caller's to keep (one per lent file, however many mappings of it), and is passed to each call
/// that needs it.
#[derive(Debug)]
pub struct BorrowedMapping {
    view: View,
    /// The file offset of the mapping's first byte.
    offset: u64,
    tracker: Arc<WriteTracker>,
    /// Whether its stores are tracked: from the start when it is writable, else from
    /// [`BorrowedMapping::make_writable`].
    tracked: bool,
    /// Where the memfd's data ends, as last found: a scan stops there (see
    /// `Fs::written_pages`).
    reach: AtomicU64,
}

impl BorrowedMapping {
    /// Maps `len` bytes (whole pages) of the file from `offset` (a multiple of 4096) through
    /// `memfd` (from [`LentShadow::memfd`]), shared, with `request`'s protection and placement.
    /// EOPNOTSUPP where this kernel cannot track stores (the caller maps another way).
    pub fn map(
        memfd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        request: &MapRequest,
    ) -> Result<BorrowedMapping> {
        if len == 0 || offset % PAGE_BYTES != 0 {
            return Err(Errno::EINVAL.into());
        }
        let len = (len as u64)
            .checked_next_multiple_of(PAGE_BYTES)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(Errno(libc::ENOMEM))?;
        let tracker = tracker().ok_or(Errno(libc::EOPNOTSUPP))?;
        let populate = !tracker.tracks_unpopulated();
        let view = View::map_placed(
            memfd,
            offset,
            len,
            true,
            request.prot,
            request.at.map(|at| (at.addr, at.replace)),
            populate,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(code) => Error::Errno(Errno(code)),
            None => io_error(e),
        })?;
        let mut mapping = BorrowedMapping {
            view,
            offset,
            tracker,
            tracked: false,
            reach: AtomicU64::new(0),
        };
        if request.prot & libc::PROT_WRITE != 0 {
            mapping.make_writable(memfd)?;
        }
        Ok(mapping)
    }

    /// The program is about to make the mapping writable (mprotect): its stores are tracked
    /// from now on. Call it before the protection changes.
    pub fn make_writable(&mut self, memfd: BorrowedFd<'_>) -> Result<()> {
        if self.tracked {
            return Ok(());
        }
        if self.tracker.tracks_unpopulated() {
            let data = data_pages(memfd, self.offset, self.view.len()).map_err(io_error)?;
            self.tracker.track_ranges(&self.view, &data)
        } else {
            self.tracker.track(&self.view)
        }
        .map_err(io_error)?;
        self.tracked = true;
        Ok(())
    }

    /// The file's pages stored to through this mapping since the last call, as (first page,
    /// pages) runs; `range`: only within these bytes of the file. Their protection is armed
    /// again in the same scan. Only the part inside the file (`memfd`'s size) and its data (a
    /// store allocates its page in the memfd) is scanned, so a mapping much larger than the
    /// data costs what the data holds.
    pub fn take_written(
        &self,
        memfd: BorrowedFd<'_>,
        range: Option<(u64, u64)>,
    ) -> Result<Vec<(u64, u64)>> {
        if !self.tracked {
            return Ok(Vec::new());
        }
        let size = rustix::fs::fstat(memfd)
            .map_err(|e| io_error(e.into()))?
            .st_size as u64;
        let (first, end) = range.unwrap_or((0, u64::MAX));
        let whole = size.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let reach =
            extend_reach(memfd, self.reach.load(Ordering::Relaxed), whole).map_err(io_error)?;
        self.reach.store(reach, Ordering::Relaxed);
        let in_file = whole.min(reach);
        let from = first.max(self.offset);
        let to = end.min(self.offset + self.view.len() as u64).min(in_file);
        let mut runs = Vec::new();
        if from >= to {
            return Ok(runs);
        }
        let at = ((from - self.offset) / PAGE_BYTES * PAGE_BYTES) as usize;
        let len = (((to - self.offset).div_ceil(PAGE_BYTES) * PAGE_BYTES) as usize - at)
            .min(self.view.len() - at);
        let mut written = Vec::new();
        self.tracker
            .take_written_in(&self.view, at, len, &mut written)
            .map_err(io_error)?;
        for (at, len) in written {
            runs.push((
                (self.offset + at as u64) / PAGE_BYTES,
                (len as u64).div_ceil(PAGE_BYTES),
            ));
        }
        Ok(runs)
    }

    /// A new mapping of the same file range, `len` bytes long, where the kernel places it,
    /// with protection `prot` (mremap with MREMAP_MAYMOVE). Report this one's written pages and
    /// drop it once the new one is in place.
    pub fn remap(&self, memfd: BorrowedFd<'_>, len: usize, prot: i32) -> Result<BorrowedMapping> {
        let request = MapRequest {
            shared: true,
            prot,
            at: None,
        };
        BorrowedMapping::map(memfd, self.offset, len, &request)
    }

    /// The mapping's first byte.
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

    /// Stores `data` at `at` in the mapping, as the program's stores would.
    pub fn store(&self, at: usize, data: &[u8]) {
        self.view.write(at, data);
    }

    /// Loads bytes at `at` of the mapping.
    pub fn load(&self, at: usize, out: &mut [u8]) {
        self.view.read(at, out);
    }

    /// The file offset of its first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Drop for BorrowedMapping {
    fn drop(&mut self) {
        if self.tracked {
            self.tracker.untrack(&self.view);
        }
    }
}
