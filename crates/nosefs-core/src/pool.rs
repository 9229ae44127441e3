//! Per-CPU pools of free table slots (pinodes, long-name records, extents), kept in DRAM and
//! rebuilt at mount from the valid bits and references on the media.
//!
//! A thread allocates from the pool of the CPU it runs on and frees into it; when that pool is
//! empty it steals half of another's, and when every pool is empty it takes a batch of *fresh*
//! slots: slots at or above the table's high-water mark, which mount never read because nothing
//! there has ever been used (`format::marks`). Before a fresh slot is handed out the mark is raised
//! past it, durably, so that every record a commit can make valid lies below the mark. Each pool
//! has its own lock, so threads on different CPUs never contend.

use std::ops::Range;

use parking_lot::Mutex;

use crate::format::marks::{self, Table};
use crate::image::Image;

/// Fresh slots handed out in one batch into the allocating CPU's pool.
const FRESH_BATCH: u64 = 64;

/// Fresh slots whose pages are reserved in the image's file at once (`Image::reserve_records`):
/// a system call per 16 batches, not per batch (one per batch made creates 7% slower).
const RESERVE_AHEAD: u64 = 16 * FRESH_BATCH;

/// Free slots of one table, split across CPUs, and the table's never-used tail.
#[derive(Debug)]
pub struct SlotPools {
    pools: Vec<crate::padded::CachePadded<Mutex<Vec<u32>>>>,
    fresh: Mutex<Fresh>,
}

/// The slots `[next, end)` have never been used; `mark` is the durable high-water mark (`None`:
/// the image keeps no mark for this table, and `next == end`).
#[derive(Debug)]
struct Fresh {
    next: u64,
    end: u64,
    table: Option<(Table, u64)>,
    /// Slots below this have their pages reserved since mount (at least `next`).
    reserved: u64,
}

fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

impl SlotPools {
    /// Pools for `cpus` CPUs with `free` dealt out round-robin in blocks so each CPU gets nearby
    /// slots, and no fresh tail (a table without a mark: every free slot is listed).
    pub fn new(cpus: usize, free: impl IntoIterator<Item = u32>) -> SlotPools {
        SlotPools::with_fresh(cpus, free, 0..0, None)
    }

    /// As [`SlotPools::new`], plus the never-used slots `fresh` of `table`, whose durable
    /// high-water mark is `fresh.start`.
    pub fn with_fresh(
        cpus: usize,
        free: impl IntoIterator<Item = u32>,
        fresh: Range<u64>,
        table: Option<Table>,
    ) -> SlotPools {
        assert!(
            fresh.is_empty() || table.is_some(),
            "a fresh tail needs a mark to raise"
        );
        let cpus = cpus.max(1);
        let mut lists = vec![Vec::new(); cpus];
        for (i, slot) in free.into_iter().enumerate() {
            lists[(i / 64) % cpus].push(slot);
        }
        for list in &mut lists {
            list.reverse(); // pop() hands out the lowest slots first
        }
        SlotPools {
            pools: lists
                .into_iter()
                .map(|l| crate::padded::CachePadded(Mutex::new(l)))
                .collect(),
            fresh: Mutex::new(Fresh {
                next: fresh.start,
                end: fresh.end,
                table: table.map(|t| (t, fresh.start)),
                reserved: fresh.start,
            }),
        }
    }

    fn home(&self) -> usize {
        current_cpu() % self.pools.len()
    }

    /// A free slot, or `None` when every pool and the fresh tail are empty. May raise the table's
    /// mark on `image` (one persisted store) before handing out a fresh slot.
    pub fn alloc(&self, image: &Image) -> Option<u32> {
        let home = self.home();
        if let Some(slot) = self.pools[home].lock().pop() {
            return Some(slot);
        }
        if let Some(slot) = self.steal(home) {
            return Some(slot);
        }
        self.take_fresh(home, image)
    }

    fn steal(&self, home: usize) -> Option<u32> {
        for i in 1..self.pools.len() {
            let victim = (home + i) % self.pools.len();
            let mut theirs = self.pools[victim].lock();
            if theirs.is_empty() {
                continue;
            }
            let keep = theirs.len() / 2;
            let mut stolen = theirs.split_off(keep);
            drop(theirs);
            let slot = stolen.pop();
            self.pools[home].lock().extend(stolen);
            return slot;
        }
        None
    }

    /// A batch of fresh slots: the first is returned, the rest go to the home pool.
    fn take_fresh(&self, home: usize, image: &Image) -> Option<u32> {
        let mut fresh = self.fresh.lock();
        let first = fresh.next;
        let end = (first + FRESH_BATCH).min(fresh.end);
        if first == end {
            return None;
        }
        let table_end = fresh.end;
        if let Some((table, _)) = fresh.table {
            // Their pages held by the image's file first: a store into a hole its file system
            // cannot fill (another program took the room) would be SIGBUS; this is ENOSPC.
            if end > fresh.reserved {
                let ahead = (first + RESERVE_AHEAD).clamp(end, table_end);
                if image.reserve_records(table, first, ahead).is_err() {
                    if image.reserve_records(table, first, end).is_err() {
                        return None;
                    }
                    fresh.reserved = end;
                } else {
                    fresh.reserved = ahead;
                }
            }
        }
        if let Some((table, mark)) = fresh.table.as_mut() {
            if end > *mark {
                // Durable before any slot past the old mark is used (format::marks).
                let raised = marks::raised(*mark, end, table_end);
                image.raise_mark(*table, raised);
                *mark = raised;
            }
        }
        fresh.next = end;
        drop(fresh);
        let mut pool = self.pools[home].lock();
        pool.extend((first + 1..end).rev().map(|s| s as u32));
        Some(first as u32)
    }

    /// Returns a slot to this CPU's pool.
    pub fn free(&self, slot: u32) {
        self.pools[self.home()].lock().push(slot);
    }

    /// Free slots in all pools and the fresh tail.
    pub fn free_count(&self) -> usize {
        let fresh = self.fresh.lock();
        let tail = (fresh.end - fresh.next) as usize;
        drop(fresh);
        tail + self.pools.iter().map(|p| p.lock().len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::layout::{Geometry, MkfsParams};
    use crate::pmem::Region;

    fn image() -> Image {
        let params = MkfsParams {
            image_bytes: 4 << 20,
            ..MkfsParams::default()
        };
        let geometry = Geometry::for_mkfs(&params).unwrap();
        let region = Region::recording(params.image_bytes).unwrap();
        crate::mkfs::format_region(&region, &geometry, (0, 0)).unwrap();
        Image::from_region(region).unwrap()
    }

    #[test]
    fn every_slot_is_handed_out_once_then_none() {
        let image = image();
        let pools = SlotPools::new(3, 1..=500);
        let mut seen = std::collections::HashSet::new();
        while let Some(slot) = pools.alloc(&image) {
            assert!(seen.insert(slot), "slot {slot} twice");
        }
        assert_eq!(seen.len(), 500, "stealing reaches every pool");
        pools.free(7);
        assert_eq!(pools.alloc(&image), Some(7));
        assert_eq!(pools.alloc(&image), None);
    }

    #[test]
    fn fresh_slots_come_after_freed_ones_and_raise_the_mark_first() {
        let image = image();
        let count = image.table_count(Table::Pinodes);
        let mark = image.mark(Table::Pinodes);
        assert_eq!(mark, 2, "mkfs marks the root only");
        let pools = SlotPools::with_fresh(2, [1u32], mark..count, Some(Table::Pinodes));
        assert_eq!(pools.free_count() as u64, 1 + count - mark);
        assert_eq!(pools.alloc(&image), Some(1), "a listed free slot first");
        let mut highest = 0;
        for _ in 0..300 {
            let slot = u64::from(pools.alloc(&image).unwrap());
            assert!(
                slot < image.mark(Table::Pinodes),
                "slot {slot} above the mark"
            );
            highest = highest.max(slot);
        }
        assert_eq!(highest, mark + 299, "fresh slots in order");
        let mut n = 301;
        while pools.alloc(&image).is_some() {
            n += 1;
        }
        assert_eq!(n as u64, 1 + count - mark);
        assert_eq!(image.mark(Table::Pinodes), count);
    }
}
