//! Free data blocks in DRAM, per CPU (seed 001, III-D "per-CPU allocation").
//!
//! The data zone is divided into one region per CPU. Each region keeps its free runs under its
//! own lock, indexed by end and by length ([`runs::FreeRuns`]), and merges a freed run with its
//! free neighbours. A thread allocates from the region of the CPU it runs on and steals from the
//! others only when its own cannot serve the request, so threads on different CPUs do not
//! contend.
//!
//! Built from the NVM bitmap at mount; the bitmap itself changes only in journal apply steps, so a
//! block handed out here is not allocated on the media until its commit applies.
//!
//! Where the image is mapped without being populated, the allocator also asks a
//! [`Populator`] for the pages just ahead of where each region hands out blocks, so that the
//! first store into a fresh block finds its page ready ([`BlockAllocator::populate_ahead`]).
//!
//! Blocks can be *promised* (fallocate's reservation): `available` counts the free blocks no one
//! was promised, and every allocation takes from it first (one atomic update), so a promise is
//! kept whatever other files do; a file holding a promise spends it before `available`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::format::bitmap;
use crate::pmem::Populator;

mod backing;
mod bits;
mod runs;
pub(crate) use backing::{reserve_metadata, Backing};
use runs::FreeRuns;

/// Blocks made ready ahead of a region's frontier: 4 MiB.
const AHEAD_BLOCKS: u64 = 1024;
/// A new request goes out when the frontier comes within this many blocks of what was asked.
const AHEAD_LOW_BLOCKS: u64 = AHEAD_BLOCKS / 2;

/// One CPU's share of the data zone: free runs inside `[first, end)`.
#[derive(Debug)]
struct Region {
    first: u64,
    end: u64,
    runs: Mutex<FreeRuns>,
    /// Every block at or past this one has never been handed out since mount (nor held at
    /// mount): its pages may never have been touched ([`BlockAllocator::is_fresh`]).
    high_water: AtomicU64,
}

/// Free runs of data blocks, split into per-CPU regions.
#[derive(Debug)]
pub struct BlockAllocator {
    regions: Vec<crate::padded::CachePadded<Region>>,
    blocks_per_region: u64,
    /// Free blocks not promised to any file.
    available: AtomicU64,
    /// Pages made ready ahead of each region's frontier (set at mount where it pays).
    ahead: OnceLock<Ahead>,
    /// The image file's pages reserved under blocks before they are handed out (set at mount
    /// for a sparse image file).
    backing: OnceLock<std::sync::Arc<Backing>>,
}

/// What [`BlockAllocator::populate_ahead`] set up.
#[derive(Debug)]
struct Ahead {
    populator: Populator,
    /// Byte offset of data block 0 in the image (blocks are contiguous from there).
    data_offset: u64,
    /// Per region: the block below which pages were asked for.
    asked: Vec<AtomicU64>,
}

fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

impl BlockAllocator {
    /// The free runs of a bitmap over `blocks` data blocks, in `regions` per-CPU regions.
    pub fn from_bitmap(bits: &[u8], blocks: u64, regions: usize) -> BlockAllocator {
        let count = (regions.max(1) as u64).min(blocks.max(1));
        let per = blocks.div_ceil(count).max(1);
        let regions = (0..count)
            .map(|i| {
                let (first, end) = (i * per, ((i + 1) * per).min(blocks));
                let free = free_runs(bits, first, end);
                // Past the last block in use: the free run that ends the region, if one does.
                let high_water = match free.last_key_value() {
                    Some((&start, &len)) if start + len == end => start,
                    _ => end,
                };
                let runs = FreeRuns::from_runs(first..end, &free);
                crate::padded::CachePadded(Region {
                    first,
                    end,
                    runs: Mutex::new(runs),
                    high_water: AtomicU64::new(high_water),
                })
            })
            .collect();
        let mut allocator = BlockAllocator {
            regions,
            blocks_per_region: per,
            available: AtomicU64::new(0),
            ahead: OnceLock::new(),
            backing: OnceLock::new(),
        };
        let free = allocator.free_blocks();
        *allocator.available.get_mut() = free;
        allocator
    }

    /// Takes up to `want` blocks from `available` (at least `min`, else none): how many.
    fn claim(&self, min: u64, want: u64) -> u64 {
        let mut now = self.available.load(Ordering::Relaxed);
        loop {
            let got = now.min(want);
            if got < min || got == 0 {
                return 0;
            }
            match self.available.compare_exchange_weak(
                now,
                now - got,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return got,
                Err(seen) => now = seen,
            }
        }
    }

    /// Gives back blocks taken from `available` but not used.
    fn unclaim(&self, count: u64) {
        self.available.fetch_add(count, Ordering::AcqRel);
    }

    /// Promises `count` free blocks to a caller (fallocate): no other allocation takes them.
    /// False, and nothing promised, when fewer are available.
    pub fn promise(&self, count: u64) -> bool {
        count == 0 || self.claim(count, count) == count
    }

    /// Promises up to `count` free blocks (mount, restoring stored reservations): how many.
    pub fn promise_upto(&self, count: u64) -> u64 {
        if count == 0 {
            return 0;
        }
        self.claim(1, count)
    }

    /// Gives back what is left of a promise (the file went, or the mount ends).
    pub fn release_promise(&self, count: u64) {
        self.unclaim(count);
    }

    /// Whether taking `block` would touch pages of an image mapped without being populated
    /// that nothing touched yet: it lies past everything its region has handed out since mount
    /// (and held at mount), and pages are made ready ahead of use
    /// ([`BlockAllocator::populate_ahead`]). A file overwriting its data asks this of its goal
    /// and takes space used before instead when there is some: otherwise every overwrite
    /// moves on into fresh space (the goal is the block after the file's last), each 4 KiB
    /// costing a page fault and memory, while the blocks the overwrites freed wait for the
    /// whole image to be swept. On a populated image or DAX, where fresh space costs nothing
    /// more, the goal stands (measured: following it is 5-10% faster for 8-16 KiB overwrites).
    pub fn is_untouched(&self, block: u64) -> bool {
        self.ahead.get().is_some() && self.is_fresh(block)
    }

    /// Whether `block` lies past everything its region has handed out since mount (and held
    /// at mount).
    fn is_fresh(&self, block: u64) -> bool {
        self.regions
            .get((block / self.blocks_per_region) as usize)
            .is_some_and(|r| block >= r.high_water.load(Ordering::Relaxed))
    }

    /// Blocks below the regions' high-water marks: every block handed out since mount or in
    /// use at mount lies there.
    pub fn touched_blocks(&self) -> u64 {
        self.regions
            .iter()
            .map(|r| r.high_water.load(Ordering::Relaxed) - r.first)
            .sum()
    }

    /// Free blocks no one was promised.
    pub fn available_blocks(&self) -> u64 {
        self.available.load(Ordering::Relaxed)
    }

    fn home(&self) -> usize {
        current_cpu() % self.regions.len()
    }

    /// Regions in the order a thread on this CPU tries them: its own first.
    fn search_order(&self) -> impl Iterator<Item = &Region> {
        let home = self.home();
        let n = self.regions.len();
        (0..n).map(move |i| &*self.regions[(home + i) % n])
    }

    /// Exactly `count` contiguous free blocks (from the shortest run that holds them), or
    /// `None`.
    pub fn alloc(&self, count: u64) -> Option<u64> {
        assert!(count > 0, "allocating no blocks");
        if self.claim(count, count) == 0 {
            return None;
        }
        match self.take(count) {
            Some(start) if self.handed_out(start, count) => Some(start),
            Some(start) => {
                self.put_back(start, count, count);
                None
            }
            None => {
                self.unclaim(count);
                None
            }
        }
    }

    /// From now on, asks `populator` for the pages just ahead of where each region hands out
    /// blocks; data block `b` lies at byte `data_offset + b * BLOCK_SIZE` of the image.
    pub(crate) fn populate_ahead(&self, populator: Populator, data_offset: u64) {
        if let Some(backing) = self.backing.get() {
            // Pages are populated only where they were reserved (reserving them first).
            let backing = std::sync::Arc::clone(backing);
            let block = crate::format::BLOCK_SIZE;
            populator.gate(Box::new(move |offset, len| {
                let start = offset.saturating_sub(data_offset) / block;
                backing.hold(start, len.div_ceil(block))
            }));
        }
        let asked = self
            .regions
            .iter()
            .map(|r| AtomicU64::new(r.first))
            .collect();
        let _ = self.ahead.set(Ahead {
            populator,
            data_offset,
            asked,
        });
    }

    /// Stops making pages ready (before the image is given back).
    pub(crate) fn stop_populating(&self) {
        if let Some(ahead) = self.ahead.get() {
            ahead.populator.stop();
        }
    }

    /// Bytes the populator made ready so far.
    pub fn populated_bytes(&self) -> u64 {
        self.ahead
            .get()
            .map_or(0, |a| a.populator.populated_bytes())
    }

    /// From now on, hands out only blocks whose pages `backing` reserved ([`Backing`]).
    pub(crate) fn reserve_backing(&self, backing: Backing) {
        let _ = self.backing.set(std::sync::Arc::new(backing));
    }

    /// Blocks taken from the runs but not handed out (their pages could not be reserved): back
    /// into the runs, and `claimed` back into `available`.
    fn put_back(&self, start: u64, count: u64, claimed: u64) {
        self.return_runs(start, count);
        self.unclaim(claimed);
    }

    /// Blocks `[start, start + count)` are about to be handed out: false, and nothing done, when
    /// their pages cannot be reserved ([`Backing`]). Otherwise, when that comes near what was
    /// asked for in its region, ask for the next [`AHEAD_BLOCKS`]; the region's high-water mark
    /// follows it.
    #[must_use]
    fn handed_out(&self, start: u64, count: u64) -> bool {
        if let Some(backing) = self.backing.get() {
            if !backing.hold(start, count) {
                return false;
            }
        }
        self.ask_ahead(start, count);
        true
    }

    /// [`BlockAllocator::handed_out`]'s requests ahead and high-water mark.
    fn ask_ahead(&self, start: u64, count: u64) {
        let index = (start / self.blocks_per_region) as usize;
        if let Some(region) = self.regions.get(index) {
            region
                .high_water
                .fetch_max(start + count, Ordering::Relaxed);
        }
        let Some(ahead) = self.ahead.get() else {
            return;
        };
        let (Some(region), Some(asked)) = (self.regions.get(index), ahead.asked.get(index)) else {
            return;
        };
        let end = start + count;
        let mark = asked.load(Ordering::Relaxed);
        if end + AHEAD_LOW_BLOCKS <= mark {
            return;
        }
        let from = mark.max(start);
        let to = (end + AHEAD_BLOCKS).min(region.end);
        if to <= from
            || asked
                .compare_exchange(mark, to, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let block = crate::format::BLOCK_SIZE;
        ahead
            .populator
            .request(ahead.data_offset + from * block, (to - from) * block);
    }

    fn take(&self, count: u64) -> Option<u64> {
        self.search_order()
            .find_map(|r| r.runs.lock().take_fit(count))
    }

    /// [`BlockAllocator::alloc_upto`] for a file holding a promise of `promised` blocks, which
    /// it spends first (and which this lowers by what it spent).
    pub fn alloc_upto_promised(
        &self,
        goal: Option<u64>,
        max: u64,
        promised: &mut u64,
    ) -> Option<(u64, u64)> {
        assert!(max > 0, "allocating no blocks");
        let own = max.min(*promised);
        let claimed = if own < max {
            self.claim(1, max - own)
        } else {
            0
        };
        if own + claimed == 0 {
            return None;
        }
        match self.take_upto(goal, own + claimed) {
            Some((start, got)) if !self.handed_out(start, got) => {
                self.put_back(start, got, claimed); // the promise stays whole
                None
            }
            Some((start, got)) => {
                // Its own promise first; what the take did not need goes back to `available`.
                let from_promise = got.min(own);
                *promised -= from_promise;
                self.unclaim(claimed - (got - from_promise));
                Some((start, got))
            }
            None => {
                self.unclaim(claimed);
                None
            }
        }
    }

    /// Exactly `count` blocks from `start` on, if every one of them is free (nothing is taken
    /// otherwise): a write that continues a file's run of the data zone.
    pub fn alloc_exact(&self, start: u64, count: u64) -> bool {
        assert!(count > 0, "allocating no blocks");
        if self.claim(count, count) == 0 {
            return false;
        }
        match self.take_at(start, count) {
            Some((_, got)) if got == count && !self.handed_out(start, count) => {
                self.put_back(start, count, count);
                false
            }
            Some((_, got)) if got == count => true,
            Some((_, got)) => {
                // The free run ends before `count` (or at its region's end): put it back.
                self.free(start, got);
                self.unclaim(count - got);
                false
            }
            None => {
                self.unclaim(count);
                false
            }
        }
    }

    /// Between 1 and `max` contiguous free blocks: starting at `goal` when that block is free (so
    /// a file that grows stays contiguous), else a run of `max` by first fit, else the longest run
    /// there is. Returns (start, length), or `None` when no block is free.
    pub fn alloc_upto(&self, goal: Option<u64>, max: u64) -> Option<(u64, u64)> {
        assert!(max > 0, "allocating no blocks");
        let claimed = self.claim(1, max);
        if claimed == 0 {
            return None;
        }
        match self.take_upto(goal, claimed) {
            Some((start, got)) if !self.handed_out(start, got) => {
                self.put_back(start, got, claimed);
                None
            }
            Some((start, got)) => {
                self.unclaim(claimed - got);
                Some((start, got))
            }
            None => {
                self.unclaim(claimed);
                None
            }
        }
    }

    /// Up to `max` blocks from the regions: see [`BlockAllocator::alloc_upto`].
    fn take_upto(&self, goal: Option<u64>, max: u64) -> Option<(u64, u64)> {
        if let Some(goal) = goal {
            if let Some(got) = self.take_at(goal, max) {
                return Some(got);
            }
        }
        if let Some(start) = self.take(max) {
            return Some((start, max));
        }
        self.search_order()
            .find_map(|r| r.runs.lock().take_longest())
    }

    /// Up to `max` blocks from `goal` on, if `goal` is free.
    fn take_at(&self, goal: u64, max: u64) -> Option<(u64, u64)> {
        let region = self.regions.get((goal / self.blocks_per_region) as usize)?;
        let got = region.runs.lock().take_at(goal, max);
        got
    }

    /// Returns `count` blocks from `start`, merging with free neighbours.
    pub fn free(&self, start: u64, count: u64) {
        self.unclaim(count);
        self.return_runs(start, count);
    }

    /// `count` blocks from `start` back into their regions' runs (`available` untouched).
    fn return_runs(&self, start: u64, count: u64) {
        let mut start = start;
        let end = start + count;
        while start < end {
            let region = &self.regions[(start / self.blocks_per_region) as usize];
            let piece_end = end.min(region.end);
            assert!(start >= region.first, "block {start} outside its region");
            region.runs.lock().free(start, piece_end - start);
            start = piece_end;
        }
    }

    /// Free blocks in all regions.
    pub fn free_blocks(&self) -> u64 {
        self.regions.iter().map(|r| r.runs.lock().blocks()).sum()
    }
}

/// The free runs of the bitmap in `[first, end)`.
fn free_runs(bits: &[u8], first: u64, end: u64) -> BTreeMap<u64, u64> {
    let mut runs = BTreeMap::new();
    let mut start = None;
    let mut block = first;
    while block < end {
        // A whole aligned word that is all free or all used moves 64 blocks at once: an empty
        // 64 GiB image has 16 Mi bits, and mount builds these runs on every start.
        if block % 64 == 0 && block + 64 <= end {
            let at = (block / 8) as usize;
            let word = u64::from_le_bytes(bits[at..at + 8].try_into().expect("8 bytes"));
            if word == 0 {
                start.get_or_insert(block);
                block += 64;
                continue;
            }
            if word == u64::MAX {
                if let Some(s) = start.take() {
                    runs.insert(s, block - s);
                }
                block += 64;
                continue;
            }
        }
        match (bitmap::is_set(bits, block), start) {
            (false, None) => start = Some(block),
            (true, Some(s)) => {
                runs.insert(s, block - s);
                start = None;
            }
            _ => {}
        }
        block += 1;
    }
    if let Some(s) = start {
        runs.insert(s, end - s);
    }
    runs
}

#[cfg(test)]
mod tests;
