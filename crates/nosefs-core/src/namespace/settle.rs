//! Lazily cleared directory logs: which logs may still hold a replayable record, and the
//! resources held back until none can name them.
//!
//! [`super::txn::commit`] ends by storing zero in its log's tail and leaves that store in the
//! cache. Writing the line back and fencing it would cost about 170 ns per operation on the
//! machine this was measured on (a write-back of a line just written back, then a fence), an
//! eighth of a create. Until the clear reaches the media the log is *unsettled*: a crash would
//! replay its record. Replaying an applied record changes nothing (the apply step is idempotent)
//! as long as nothing it names has changed since, and two rules keep it that way:
//!
//! 1. **Marks.** Every mirror bucket remembers the last commit that touched it: its log and its
//!    number in that log ([`super::mirror::MirrorBucket::last_commit`]). A commit through another
//!    log that touches the bucket first settles that log, if that very record is still the
//!    log's unsettled one: writes its tail line back and fences, before its own commit point. (A
//!    later commit through the same log has already replaced the record on the media: its own
//!    commit wrote back and fenced that line.) So for each bucket, the only unsettled record that
//!    can have touched it is the one its mark names, and it can never be replayed over a newer
//!    commit's changes to that bucket.
//! 2. **Limbo.** Pinode slots, long-name records, extents and blocks that a directory commit
//!    frees are held back, not returned to their pools, until every log has been settled
//!    ([`Settler::settle_all`]). So a replayed record never reaches a slot or block that holds
//!    something else by then.
//!
//! Settling everything costs one write-back per unsettled log and one fence. It runs when the
//! limbo passes [`LIMBO_MAX_ITEMS`], when an allocation finds nothing, at syncfs and at unmount
//! (so a clean image has every tail durably zero). Recovery replays every intact committed log,
//! in any order: by the rules above, only the commits a crash interrupted change anything, and
//! those touch disjoint buckets and slots (each held its buckets' locks and its own new slots).
//!
//! File logs are not affected: [`crate::file::journal::commit`] still clears its log durably.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::image::Image;
use crate::padded::CachePadded;

/// Items (slots, records, extents, block runs) one CPU's part of the limbo holds before it
/// settles everything.
pub const LIMBO_MAX_ITEMS: usize = 1024;

/// What directory commits freed, held until every log is settled.
#[derive(Debug, Default)]
pub struct Limbo {
    /// Pinode slots.
    pub pinodes: Vec<u32>,
    /// Long-name records (never 0).
    pub long_names: Vec<u32>,
    /// Extents.
    pub extents: Vec<u32>,
    /// Block runs (start, count).
    pub blocks: Vec<(u64, u64)>,
}

impl Limbo {
    fn append(&mut self, other: &mut Limbo) {
        self.pinodes.append(&mut other.pinodes);
        self.long_names.append(&mut other.long_names);
        self.extents.append(&mut other.extents);
        self.blocks.append(&mut other.blocks);
    }

    fn items(&self) -> usize {
        self.pinodes.len() + self.long_names.len() + self.extents.len() + self.blocks.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items() == 0
    }

    /// Blocks it holds.
    pub fn block_count(&self) -> u64 {
        self.blocks.iter().map(|&(_, n)| n).sum()
    }
}

/// The settled state of every directory log, and the limbo.
#[derive(Debug)]
pub struct Settler {
    /// Per log: commits through it since mount (its records' numbers).
    commits: Vec<CachePadded<AtomicU64>>,
    /// Per log: the number of its unsettled record, or 0 when its tail is durably zero (or
    /// durably replaced by a later commit's).
    unsettled: Vec<CachePadded<AtomicU64>>,
    /// Per CPU, like the slot pools, so that removals on different CPUs never share a lock.
    limbo: Vec<CachePadded<Mutex<Limbo>>>,
    /// Held by [`Settler::settle_all`] until what it released is back in the pools, so that an
    /// allocation that settles after finding nothing also sees what a concurrent settle took.
    settling: Mutex<()>,
}

/// Bits of a commit's name ([`Settler::cleared_lazily`]) that hold its number in its log.
const NUMBER_BITS: u32 = 48;

impl Settler {
    /// Every one of `logs` settled (as after recovery), nothing held back; limbo parts for `cpus`.
    pub fn new(logs: u64, cpus: usize) -> Settler {
        Settler {
            commits: (0..logs).map(|_| CachePadded::default()).collect(),
            unsettled: (0..logs).map(|_| CachePadded::default()).collect(),
            limbo: (0..cpus.max(1)).map(|_| CachePadded::default()).collect(),
            settling: Mutex::new(()),
        }
    }

    /// Records that a commit through `log` (held locked by the caller) has stored its clear
    /// without writing it back. Returns the commit's name for the marks of the buckets it
    /// touched: its log and its number in that log, never 0.
    pub fn cleared_lazily(&self, log: u64) -> u64 {
        let number = self.commits[log as usize].fetch_add(1, Ordering::Relaxed) + 1;
        assert!(number < 1 << NUMBER_BITS && log < 1 << (64 - NUMBER_BITS));
        self.unsettled[log as usize].store(number, Ordering::Release);
        (log << NUMBER_BITS) | number
    }

    /// The log of a commit named by [`Settler::cleared_lazily`] if that commit's record is still
    /// its log's unsettled one (it may be replayed), else `None`.
    pub fn unsettled_log_of(&self, commit: u64) -> Option<u64> {
        let (log, number) = (commit >> NUMBER_BITS, commit & ((1 << NUMBER_BITS) - 1));
        (commit != 0 && self.unsettled[log as usize].load(Ordering::Acquire) == number)
            .then_some(log)
    }

    /// Whether `log` may hold a replayable record.
    pub fn is_unsettled(&self, log: u64) -> bool {
        self.unsettled[log as usize].load(Ordering::Acquire) != 0
    }

    /// Makes the clears of `logs` durable: writes back their tail lines and fences. A log
    /// committed to meanwhile stays unsettled (its new record is not what was written back).
    /// Takes no lock: a write-back of a line some commit is writing is harmless, as the cache
    /// could have evicted it at that moment anyway.
    pub fn settle(&self, image: &Image, logs: &[u64]) {
        let region = image.region();
        let g = image.geometry();
        let mut written_back: SmallVec<[(u64, u64); 8]> = SmallVec::new();
        for &log in logs {
            let number = self.unsettled[log as usize].load(Ordering::Acquire);
            if number != 0 && !written_back.iter().any(|&(l, _)| l == log) {
                region.flush(g.dir_log_offset(log), 8);
                written_back.push((log, number));
            }
        }
        if written_back.is_empty() {
            return;
        }
        region.fence();
        for (log, number) in written_back {
            let _ = self.unsettled[log as usize].compare_exchange(
                number,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Holds back what `hold` adds to the limbo. Returns whether the limbo is now full, and the
    /// caller should [`Settler::settle_all`].
    pub fn hold(&self, hold: impl FnOnce(&mut Limbo)) -> bool {
        let cpu = rustix::thread::sched_getcpu() % self.limbo.len();
        let mut limbo = self.limbo[cpu].lock();
        hold(&mut limbo);
        limbo.items() >= LIMBO_MAX_ITEMS
    }

    /// Settles every log and hands everything held until now to `give_back` (which returns it
    /// to the pools) before another settle can start. Returns whether anything was held. The
    /// limbo is taken *before* the write-backs: everything in it was freed after its commit
    /// stored its clear, so the write-backs below cover that clear (or a later commit's record
    /// on the same line).
    pub fn settle_all(&self, image: &Image, give_back: impl FnOnce(&Limbo)) -> bool {
        let _one_at_a_time = self.settling.lock();
        let mut released = Limbo::default();
        for part in &self.limbo {
            released.append(&mut part.lock());
        }
        let logs: Vec<u64> = (0..self.unsettled.len() as u64)
            .filter(|&log| self.is_unsettled(log))
            .collect();
        self.settle(image, &logs);
        give_back(&released);
        !released.is_empty()
    }

    /// Blocks held back now (they are free as far as space accounting goes).
    pub fn held_blocks(&self) -> u64 {
        self.limbo
            .iter()
            .map(|part| part.lock().block_count())
            .sum()
    }

    /// Pinode slots held back now.
    pub fn held_pinodes(&self) -> usize {
        self.limbo
            .iter()
            .map(|part| part.lock().pinodes.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::tests::fresh;

    #[test]
    fn a_mark_names_its_record_until_the_log_moves_on_or_settles() {
        let h = fresh(None);
        let image = h.fs().image();
        let settler = Settler::new(image.geometry().dir_log_count(), 2);
        let first = settler.cleared_lazily(5);
        assert_eq!(settler.unsettled_log_of(first), Some(5));
        assert_eq!(settler.unsettled_log_of(0), None, "no commit since mount");
        // A later commit through the same log replaced the record on the media.
        let second = settler.cleared_lazily(5);
        assert_eq!(settler.unsettled_log_of(first), None);
        assert_eq!(settler.unsettled_log_of(second), Some(5));
        // Settling writes the tail line back and fences it.
        let tail = image.geometry().dir_log_offset(5);
        image.region().store_u64(tail, 0);
        settler.settle(image, &[5]);
        assert_eq!(settler.unsettled_log_of(second), None);
        assert!(!settler.is_unsettled(5));
        let in_flight = image.region().recorder().unwrap().unpersisted_lines();
        assert!(!in_flight.contains(&tail), "the settled tail is durable");
    }

    #[test]
    fn the_limbo_fills_per_cpu_and_settling_hands_everything_back_once() {
        let h = fresh(None);
        let image = h.fs().image();
        let settler = Settler::new(image.geometry().dir_log_count(), 1);
        settler.cleared_lazily(3);
        for slot in 1..LIMBO_MAX_ITEMS as u32 {
            assert!(!settler.hold(|limbo| limbo.pinodes.push(slot)));
        }
        assert!(settler.hold(|limbo| limbo.blocks.push((100, 4))), "full");
        assert_eq!(settler.held_blocks(), 4);
        let mut returned = 0;
        assert!(settler.settle_all(image, |limbo| returned = limbo.items()));
        assert_eq!(returned, LIMBO_MAX_ITEMS);
        assert!(
            !settler.is_unsettled(3),
            "settling everything settles every log"
        );
        assert!(!settler.settle_all(image, |limbo| assert!(limbo.is_empty())));
        assert_eq!((settler.held_blocks(), settler.held_pinodes()), (0, 0));
    }
}
