//! The sync side of mapped files: which pages were written through the mappings since the last
//! sync (the write-protect scan up to where the shadow holds data, or the comparison fallback),
//! and their way into the file's data path ahead of the commit (see the parent module).

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{io_error, Shadow, ShadowState, SharedView, PAGE_BYTES};
use crate::error::Result;
use crate::fs::Fs;
use crate::inode::Inode;

impl Fs {
    /// Moves the pages written through the file's mappings into its data path (pending writes),
    /// for the commit the caller makes next. A shadow no mapping uses any more is dropped.
    /// `range`: only the pages of this part of the file (`None`: all).
    pub(in crate::file) fn take_mapped_writes(
        &self,
        inode: &Inode,
        range: Option<(u64, u64)>,
    ) -> Result<()> {
        let Some(shadow) = self.shadow_of(inode.ino) else {
            return Ok(());
        };
        let mut state = shadow.state.lock();
        let pages = self.written_pages(inode, &shadow, &mut state, range)?;
        let mut page = vec![0u8; PAGE_BYTES as usize];
        let mut run_start = None;
        let mut run: Vec<u8> = Vec::new();
        let size = state.size;
        let flush = |start: u64, bytes: &[u8]| -> Result<()> {
            if !bytes.is_empty() {
                self.write_at(inode, Some(start), bytes)?;
            }
            Ok(())
        };
        let mut previous = None;
        for p in pages {
            let at = p * PAGE_BYTES;
            if at >= size {
                break;
            }
            if previous.map_or(true, |q: u64| q + 1 != p) {
                if let Some(start) = run_start {
                    flush(start, &run)?;
                }
                run.clear();
                run_start = Some(at);
            }
            let n = (size - at).min(PAGE_BYTES) as usize;
            state.view.read(at as usize, &mut page[..n]);
            run.extend_from_slice(&page[..n]);
            previous = Some(p);
        }
        if let Some(start) = run_start {
            flush(start, &run)?;
        }
        state.orphaned_pages.clear();
        if state.shared.is_empty() && Arc::strong_count(&shadow) <= 2 {
            drop(state);
            let mut by_ino = self.shadows.by_ino.lock();
            // Mappings hold the shadow too: drop it only when none is alive (private ones included).
            if Arc::strong_count(&shadow) <= 2 {
                by_ino.remove(&inode.ino);
                self.shadows.live.store(by_ino.len(), Ordering::Release);
            }
        }
        Ok(())
    }

    /// Views protect only the pages that held data when they were made (`track_ranges`), so a
    /// page of a hole that the program only read comes back as written. Those that lie in a
    /// hole of the file and read as zeros are dropped: writing them would turn holes into data
    /// (space, SEEK_HOLE) for nothing.
    fn drop_read_holes(
        &self,
        inode: &Inode,
        state: &ShadowState,
        pages: &mut BTreeSet<u64>,
    ) -> Result<()> {
        if pages.is_empty() {
            return Ok(());
        }
        let file = self.file_of(inode)?;
        let data = file.lock();
        let mut page = [0u8; PAGE_BYTES as usize];
        pages.retain(|&p| {
            let at = p * PAGE_BYTES;
            if data.map.overlapping(at, at + PAGE_BYTES).next().is_some() {
                return true;
            }
            let n = (state.size.saturating_sub(at)).min(PAGE_BYTES) as usize;
            state.view.read(at as usize, &mut page[..n]);
            page[..n].iter().any(|&b| b != 0)
        });
        Ok(())
    }

    /// Pages of the shadow written since the last sync, ascending.
    fn written_pages(
        &self,
        inode: &Inode,
        shadow: &Shadow,
        state: &mut ShadowState,
        range: Option<(u64, u64)>,
    ) -> Result<BTreeSet<u64>> {
        let (first, end) = range.unwrap_or((0, u64::MAX));
        let mut pages = std::mem::take(&mut state.orphaned_pages);
        if self.shadows.whole_file {
            // The ablation: still scan (re-arming the protection), then take every page.
            if let Some(tracker) = &shadow.tracker {
                let mut runs = Vec::new();
                for s in state.shared.iter().filter(|s| s.tracked) {
                    tracker.take_written(&s.view, &mut runs).map_err(io_error)?;
                }
            }
            pages.extend(0..state.size.div_ceil(PAGE_BYTES));
            return Ok(pages);
        }
        match &shadow.tracker {
            Some(tracker) => {
                let mut runs = Vec::new();
                // Stores land only inside the file (a page past its end faults), so a mapping
                // much larger than the file (LMDB maps its whole map_size) is scanned only as
                // far as the file reaches: the cost follows the file, not the mapping. And a
                // store allocates its page in the memfd, so the scan stops where the memfd's
                // data does: LMDB with writemap sizes its file to the whole map (1 GiB of which
                // it uses tens of MiB), and walking the rest of the view's page tables took half
                // of each write transaction.
                let mut in_file = state.size.div_ceil(PAGE_BYTES) * PAGE_BYTES;
                if state.shared.iter().any(|s| s.tracked) {
                    state.reach = extend_reach(shadow.memfd.as_fd(), state.reach, in_file)
                        .map_err(io_error)?;
                    in_file = in_file.min(state.reach);
                }
                for SharedView { view, offset, .. } in state.shared.iter().filter(|s| s.tracked) {
                    // The part of this view inside the range, in whole pages of the view.
                    let from = first.max(*offset);
                    let to = end.min(offset + view.len() as u64).min(in_file);
                    if from >= to {
                        continue;
                    }
                    let at = ((from - offset) / PAGE_BYTES * PAGE_BYTES) as usize;
                    let len = ((to - offset).div_ceil(PAGE_BYTES) * PAGE_BYTES) as usize - at;
                    runs.clear();
                    tracker
                        .take_written_in(view, at, len.min(view.len() - at), &mut runs)
                        .map_err(io_error)?;
                    for &(at, len) in &runs {
                        let first = (offset + at as u64) / PAGE_BYTES;
                        pages.extend(first..first + (len as u64).div_ceil(PAGE_BYTES));
                    }
                }
                if tracker.tracks_unpopulated() {
                    self.drop_read_holes(inode, state, &mut pages)?;
                }
            }
            None => self.differing_pages(inode, state, first, end, &mut pages)?,
        }
        Ok(pages)
    }

    /// The fallback's record of stores: every page of `[first, end)` whose bytes in the shadow
    /// differ from the file's, added to `pages`. O(range), no cost per store.
    pub(in crate::file) fn differing_pages(
        &self,
        inode: &Inode,
        state: &ShadowState,
        first: u64,
        end: u64,
        pages: &mut BTreeSet<u64>,
    ) -> Result<()> {
        let file = self.file_of(inode)?;
        let data = file.lock();
        let (mut mine, mut theirs) = (
            vec![0u8; PAGE_BYTES as usize],
            vec![0u8; PAGE_BYTES as usize],
        );
        let mut at = first / PAGE_BYTES * PAGE_BYTES;
        while at < state.size.min(end) {
            let n = self.read_locked(&data, at, &mut theirs);
            state.view.read(at as usize, &mut mine[..n]);
            if mine[..n] != theirs[..n] {
                pages.insert(at / PAGE_BYTES);
            }
            at += PAGE_BYTES;
        }
        Ok(())
    }
}

/// The end of the last data run of `memfd` in `[reach, end)` (page aligned), or `reach` when
/// there is none (no system call when `reach` covers `end`, a file mapped whole): what
/// [`Fs::written_pages`] scans up to. SEEK_DATA skips a hole at once;
/// SEEK_HOLE walks a data run page by page, so the runs found since the last call are walked,
/// not the whole file.
pub(in crate::file) fn extend_reach(
    memfd: std::os::fd::BorrowedFd<'_>,
    reach: u64,
    end: u64,
) -> std::io::Result<u64> {
    if reach >= end {
        return Ok(reach);
    }
    let runs = data_pages(memfd, reach, (end - reach) as usize)?;
    Ok(runs
        .last()
        .map_or(reach, |&(at, len)| reach + (at + len) as u64))
}

/// The pages of `memfd` in `[offset, offset + len)` that hold data (SEEK_DATA to SEEK_HOLE), as
/// (offset from `offset`, bytes) runs of whole pages: what a new view of the range protects
/// (`WriteTracker::track_ranges`).
pub(in crate::file) fn data_pages(
    memfd: std::os::fd::BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> std::io::Result<Vec<(usize, usize)>> {
    use rustix::fs::SeekFrom;
    let end = offset + len as u64;
    let mut runs = Vec::new();
    let mut at = offset;
    while at < end {
        let data = match rustix::fs::seek(memfd, SeekFrom::Data(at)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break, // no data at or past `at`
            Err(e) => return Err(e.into()),
        };
        if data >= end {
            break;
        }
        let hole = rustix::fs::seek(memfd, SeekFrom::Hole(data))?.min(end);
        let first = data / PAGE_BYTES * PAGE_BYTES;
        let last = hole
            .div_ceil(PAGE_BYTES)
            .saturating_mul(PAGE_BYTES)
            .min(end);
        runs.push(((first - offset) as usize, (last - first) as usize));
        at = last;
    }
    Ok(runs)
}
