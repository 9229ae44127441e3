//! Lazily cleared logs, of both journals: which logs may still hold a replayable record, and the
//! resources held back until none can name them.
//!
//! A directory commit ([`crate::namespace::txn::commit`]) and a file commit
//! ([`crate::file::journal::commit`]) end by storing zero in their log's tail and leave that store
//! in the cache. Writing the line back and fencing it would cost a fence per operation (about
//! 170 ns on the machine this was measured on: an eighth of a create, a tenth of an aligned 4 KiB
//! overwrite with fsync). Until the clear reaches the media the log is *unsettled*: a crash would
//! replay its record. Replaying an applied record changes nothing (the apply steps are idempotent)
//! as long as nothing it names has changed since, and these rules keep it that way:
//!
//! 1. **Marks.** Every mirror bucket remembers the last directory commit that touched it, and
//!    every file's data state the last file commit of that file: its log and its number in that
//!    log ([`super::namespace::mirror::MirrorBucket::last_commit`], `FileState::last_commit`). A
//!    commit through another log that touches the bucket (or commits the file) first settles that
//!    log, if that very record is still the log's unsettled one: writes its tail line back and
//!    fences, before its own commit point. (A later commit through the same log has already
//!    replaced the record on the media: its own commit wrote back and fenced that line.) So for
//!    each bucket and each file, the only unsettled record that can have touched it is the one its
//!    mark names, and it can never be replayed over a newer commit's changes to it.
//! 2. **Limbo.** Pinode slots, long-name records, extents and blocks that a directory commit
//!    frees are held back, not returned to their pools, until every log of both journals has
//!    been settled ([`Settler::settle_all`]). What a file commit frees (its retired extents, the
//!    blocks no extent holds any more, its overflow blocks) is held by its log instead
//!    ([`Settler::hold_for_log`]), and released as soon as that record can no longer be
//!    replayed: when the log's next commit reaches its commit point (which replaces the record on
//!    the media) or the log is settled. A file rewriting its pages thus gets the blocks its last
//!    commit but one freed back at once, instead of taking fresh ones (each a page fault and
//!    memory the first time) until the next settle. So a replayed record never reaches a slot or
//!    block that holds something else by then.
//! 3. **Superseded file records.** A directory commit can end a file's primary pinode (a rename or
//!    attribute change moves it to a new slot; the last unlink removes it) without settling the
//!    file's log. Recovery replays a file record only while its slot still holds its file's
//!    primary pinode, after the directory logs are replayed; otherwise a later directory commit
//!    superseded it, after its apply step was durable (the inode lock orders the two), and it is
//!    skipped. The old slot itself is in the limbo until every log is settled.
//!
//! Settling everything costs one write-back per unsettled log and one fence. It runs when the
//! limbo passes [`LIMBO_MAX_ITEMS`], when an allocation finds nothing, at syncfs and at unmount
//! (so a clean image has every tail durably zero). Recovery replays every intact committed log:
//! by the rules above, only the commits a crash interrupted change anything, and those touch
//! disjoint buckets, files and slots (each held its buckets' or its file's locks and its own new
//! slots).

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::fs::Fs;
use crate::image::Image;
use crate::journal::fault;
use crate::padded::CachePadded;

/// Items (slots, records, extents, block runs) one CPU's part of the limbo holds before it
/// settles everything.
pub const LIMBO_MAX_ITEMS: usize = 1024;

/// What commits freed, held until no log can replay a record naming it. Inline room for what
/// one commit frees, so that holding it costs no allocation on a commit's path.
#[derive(Debug, Default)]
pub struct Limbo {
    /// Pinode slots.
    pub pinodes: SmallVec<[u32; 2]>,
    /// Long-name records (never 0).
    pub long_names: SmallVec<[u32; 2]>,
    /// Extents.
    pub extents: SmallVec<[u32; 4]>,
    /// Block runs (start, count).
    pub blocks: SmallVec<[(u64, u64); 4]>,
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

/// The journal a log belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Journal {
    /// The directory journal (`namespace::txn`).
    Dir,
    /// The file journal (`file::journal`).
    File,
}

/// The settled state of every log of both journals, and the limbo. A log is named by its
/// *index*: a directory log's is its number, a file log's the number of directory logs plus its
/// own ([`Settler::index`]).
#[derive(Debug)]
pub struct Settler {
    /// Directory logs, including the reserved log 0: where the file logs' indexes start.
    dir_logs: u64,
    /// Per log: commits through it since mount (its records' numbers).
    commits: Vec<CachePadded<AtomicU64>>,
    /// Per log: the number of its unsettled record, or 0 when its tail is durably zero (or
    /// durably replaced by a later commit's).
    unsettled: Vec<CachePadded<AtomicU64>>,
    /// Per CPU, like the slot pools, so that removals on different CPUs never share a lock.
    limbo: Vec<CachePadded<Mutex<Limbo>>>,
    /// Per file log: what the commit with that number freed, held while its record may be
    /// replayed (rule 2).
    held_by_file_log: Vec<CachePadded<Mutex<(u64, Limbo)>>>,
    /// Held by [`Settler::settle_all`] until what it released is back in the pools, so that an
    /// allocation that settles after finding nothing also sees what a concurrent settle took.
    settling: Mutex<()>,
}

/// Bits of a commit's name ([`Settler::cleared_lazily`]) that hold its number in its log.
const NUMBER_BITS: u32 = 48;

impl Settler {
    /// Every one of `dir_logs` and `file_logs` settled (as after recovery), nothing held back;
    /// limbo parts for `cpus`.
    pub fn new(dir_logs: u64, file_logs: u64, cpus: usize) -> Settler {
        let logs = dir_logs + file_logs;
        Settler {
            dir_logs,
            commits: (0..logs).map(|_| CachePadded::default()).collect(),
            unsettled: (0..logs).map(|_| CachePadded::default()).collect(),
            limbo: (0..cpus.max(1)).map(|_| CachePadded::default()).collect(),
            held_by_file_log: (0..file_logs).map(|_| CachePadded::default()).collect(),
            settling: Mutex::new(()),
        }
    }

    /// The index of log `log` of `journal`.
    pub fn index(&self, journal: Journal, log: u64) -> u64 {
        match journal {
            Journal::Dir => {
                assert!(log < self.dir_logs, "directory log {log} past the journal");
                log
            }
            Journal::File => self.dir_logs + log,
        }
    }

    /// The offset of the tail word of the log at `index`.
    fn tail_offset(&self, image: &Image, index: u64) -> u64 {
        let g = image.geometry();
        if index < self.dir_logs {
            g.dir_log_offset(index)
        } else {
            g.file_log_offset(index - self.dir_logs)
        }
    }

    /// Records that a commit through log `log` of `journal` (held by the caller) has stored its
    /// clear without writing it back. Returns the commit's name for the marks of what it touched:
    /// its log's index and its number in that log, never 0.
    pub fn cleared_lazily(&self, journal: Journal, log: u64) -> u64 {
        let index = self.index(journal, log);
        let number = self.commits[index as usize].fetch_add(1, Ordering::Relaxed) + 1;
        assert!(number < 1 << NUMBER_BITS && index < 1 << (64 - NUMBER_BITS));
        self.unsettled[index as usize].store(number, Ordering::Release);
        (index << NUMBER_BITS) | number
    }

    /// The index of the log of a commit named by [`Settler::cleared_lazily`] if that commit's
    /// record is still its log's unsettled one (it may be replayed), else `None`.
    pub fn unsettled_log_of(&self, commit: u64) -> Option<u64> {
        let (index, number) = (commit >> NUMBER_BITS, commit & ((1 << NUMBER_BITS) - 1));
        (commit != 0 && self.unsettled[index as usize].load(Ordering::Acquire) == number)
            .then_some(index)
    }

    /// Whether the log at `index` may hold a replayable record.
    pub fn is_unsettled(&self, index: u64) -> bool {
        self.unsettled[index as usize].load(Ordering::Acquire) != 0
    }

    /// Makes the clears of the logs at `indexes` durable: writes back their tail lines and
    /// fences. A log committed to meanwhile stays unsettled (its new record is not what was
    /// written back). Takes no lock: a write-back of a line some commit is writing is harmless,
    /// as the cache could have evicted it at that moment anyway. Returns what the file logs among
    /// them held for the records now settled, for the caller to give back to the pools.
    #[must_use = "what the settled file logs held goes back to the pools"]
    pub fn settle(&self, image: &Image, indexes: &[u64]) -> Limbo {
        let region = image.region();
        let mut written_back: SmallVec<[(u64, u64); 8]> = SmallVec::new();
        for &index in indexes {
            let number = self.unsettled[index as usize].load(Ordering::Acquire);
            if number != 0 && !written_back.iter().any(|&(l, _)| l == index) {
                region.flush(self.tail_offset(image, index), 8);
                written_back.push((index, number));
            }
        }
        let mut released = Limbo::default();
        if written_back.is_empty() {
            return released;
        }
        region.fence();
        for (index, number) in written_back {
            let _ = self.unsettled[index as usize].compare_exchange(
                number,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            // Every record of this log up to `number` stored its clear before `number` was
            // read above, so the write-back covered it: what they held is free.
            if let Some(held) = self.held_by(index) {
                let mut held = held.lock();
                if held.0 <= number {
                    released.append(&mut held.1);
                }
            }
        }
        released
    }

    /// What the file log at `index` holds; `None` for a directory log.
    fn held_by(&self, index: u64) -> Option<&Mutex<(u64, Limbo)>> {
        let log = index.checked_sub(self.dir_logs)?;
        Some(&self.held_by_file_log[log as usize])
    }

    /// Holds what the file commit named `commit` ([`Settler::cleared_lazily`]) freed, while its
    /// record may be replayed, and returns what is free now: what the log held for an earlier
    /// record (this commit's commit point replaced it on the media), or `frees` itself when a
    /// later commit through the log has already replaced this one's record.
    #[must_use = "what is released goes back to the pools"]
    pub fn hold_for_log(&self, commit: u64, frees: Limbo) -> Limbo {
        self.hold_by_log(commit, frees, false)
    }

    /// Adds `frees` to what the file log of commit `commit` holds for it: blocks the file gave up
    /// outside a commit that the commit's record may name (a tail block that an extent it
    /// retired covered). Returns what is free now, as [`Settler::hold_for_log`] does.
    #[must_use = "what is released goes back to the pools"]
    pub fn hold_more_for_log(&self, commit: u64, frees: Limbo) -> Limbo {
        self.hold_by_log(commit, frees, true)
    }

    fn hold_by_log(&self, commit: u64, mut frees: Limbo, more: bool) -> Limbo {
        let (index, number) = (commit >> NUMBER_BITS, commit & ((1 << NUMBER_BITS) - 1));
        let mut held = self.held_by(index).expect("a file log").lock();
        if held.0 > number {
            return frees;
        }
        if more && held.0 == number {
            held.1.append(&mut frees);
            return frees;
        }
        held.0 = number;
        std::mem::swap(&mut held.1, &mut frees);
        frees
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
            .filter(|&index| self.is_unsettled(index))
            .collect();
        released.append(&mut self.settle(image, &logs));
        // A file log may hold frees of a record a settle or a later commit through it made
        // unreplayable without releasing them (its hold came after that settle). The log's
        // number is read after the hold's lock is taken, so a record whose commit stored its
        // number before holding is seen as still unsettled, and kept.
        for (log, held) in self.held_by_file_log.iter().enumerate() {
            let mut held = held.lock();
            let current = self.unsettled[self.dir_logs as usize + log].load(Ordering::Acquire);
            if !held.1.is_empty() && current != held.0 {
                released.append(&mut held.1);
            }
        }
        give_back(&released);
        !released.is_empty()
    }

    /// Blocks held back now (they are free as far as space accounting goes).
    pub fn held_blocks(&self) -> u64 {
        let in_limbo: u64 = self
            .limbo
            .iter()
            .map(|part| part.lock().block_count())
            .sum();
        let by_logs: u64 = self
            .held_by_file_log
            .iter()
            .map(|held| held.lock().1.block_count())
            .sum();
        in_limbo + by_logs
    }

    /// Pinode slots held back now.
    pub fn held_pinodes(&self) -> usize {
        self.limbo
            .iter()
            .map(|part| part.lock().pinodes.len())
            .sum()
    }
}

impl Fs {
    /// Runs `alloc`; when it finds nothing, settles every log, returns what commits held back,
    /// and runs it again (also when this settle found nothing: a concurrent one may just have
    /// returned what it took, and `settle_all` waits for it).
    pub(crate) fn alloc_or_settle<T>(&self, alloc: impl Fn() -> Option<T>) -> Option<T> {
        alloc().or_else(|| {
            self.settle_all();
            alloc()
        })
    }

    /// Settles every log of both journals and returns what commits held back to the pools.
    /// Returns whether anything was held back.
    pub(crate) fn settle_all(&self) -> bool {
        self.settler
            .settle_all(&self.image, |released| self.return_to_pools(released))
    }

    /// Holds back resources a commit freed until the logs are settled (rule 2).
    pub(crate) fn hold_back(&self, hold: impl FnOnce(&mut Limbo)) {
        if fault::active(fault::Fault::SkipLimbo) {
            let mut limbo = Limbo::default();
            hold(&mut limbo);
            self.return_to_pools(&limbo);
            return;
        }
        if self.settler.hold(hold) {
            self.settle_all();
        }
    }

    /// Returns what was held back to the pools.
    pub(crate) fn return_to_pools(&self, released: &Limbo) {
        released.pinodes.iter().for_each(|&s| self.pinodes.free(s));
        released
            .long_names
            .iter()
            .for_each(|&r| self.long_names.free(r));
        released.extents.iter().for_each(|&e| self.extents.free(e));
        released
            .blocks
            .iter()
            .for_each(|&(s, n)| self.blocks.free(s, n));
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
        let g = image.geometry();
        let settler = Settler::new(g.dir_log_count(), g.file_log_count(), 2);
        for (journal, tail) in [
            (Journal::Dir, g.dir_log_offset(5)),
            (Journal::File, g.file_log_offset(5)),
        ] {
            let index = settler.index(journal, 5);
            let first = settler.cleared_lazily(journal, 5);
            assert_eq!(settler.unsettled_log_of(first), Some(index));
            assert_eq!(settler.unsettled_log_of(0), None, "no commit since mount");
            // A later commit through the same log replaced the record on the media.
            let second = settler.cleared_lazily(journal, 5);
            assert_eq!(settler.unsettled_log_of(first), None);
            assert_eq!(settler.unsettled_log_of(second), Some(index));
            // Settling writes the tail line back and fences it.
            image.region().store_u64(tail, 0);
            assert!(
                settler.settle(image, &[index]).is_empty(),
                "nothing was held"
            );
            assert_eq!(settler.unsettled_log_of(second), None);
            assert!(!settler.is_unsettled(index));
            let in_flight = image.region().recorder().unwrap().unpersisted_lines();
            assert!(!in_flight.contains(&tail), "the settled tail is durable");
        }
        assert_ne!(
            settler.index(Journal::Dir, 5),
            settler.index(Journal::File, 5),
            "the journals' logs have indexes of their own"
        );
    }

    #[test]
    fn a_file_log_holds_its_records_frees_until_replaced_or_settled() {
        let h = fresh(None);
        let image = h.fs().image();
        let g = image.geometry();
        let settler = Settler::new(g.dir_log_count(), g.file_log_count(), 1);
        let frees = |block: u64| Limbo {
            blocks: smallvec::smallvec![(block, 1)],
            ..Limbo::default()
        };
        let first = settler.cleared_lazily(Journal::File, 7);
        assert!(settler.hold_for_log(first, frees(10)).is_empty());
        assert_eq!(settler.held_blocks(), 1);
        // The log's next commit replaced the first record: its frees come back.
        let second = settler.cleared_lazily(Journal::File, 7);
        assert_eq!(
            settler.hold_for_log(second, frees(20)).blocks.as_slice(),
            [(10, 1)]
        );
        // A hold that comes after a later record's is released at once.
        let third = settler.cleared_lazily(Journal::File, 7);
        assert_eq!(
            settler.hold_for_log(third, frees(30)).blocks.as_slice(),
            [(20, 1)]
        );
        assert_eq!(
            settler.hold_for_log(second, frees(25)).blocks.as_slice(),
            [(25, 1)]
        );
        // Settling the log gives back what it held for the record it settled.
        image.region().store_u64(g.file_log_offset(7), 0);
        let index = settler.index(Journal::File, 7);
        assert_eq!(settler.settle(image, &[index]).blocks.as_slice(), [(30, 1)]);
        assert_eq!(settler.held_blocks(), 0);
        // A hold after its log was settled is given back by the next settle of everything.
        let fourth = settler.cleared_lazily(Journal::File, 7);
        assert!(settler.hold_for_log(fourth, frees(40)).is_empty());
        assert_eq!(settler.settle(image, &[index]).blocks.as_slice(), [(40, 1)]);
        let fifth = settler.cleared_lazily(Journal::File, 7);
        let _ = settler.settle(image, &[index]);
        assert!(settler.hold_for_log(fifth, frees(50)).is_empty());
        let mut returned = Vec::new();
        settler.settle_all(image, |limbo| returned = limbo.blocks.to_vec());
        assert_eq!(returned, [(50, 1)]);
    }

    #[test]
    fn the_limbo_fills_per_cpu_and_settling_hands_everything_back_once() {
        let h = fresh(None);
        let image = h.fs().image();
        let g = image.geometry();
        let settler = Settler::new(g.dir_log_count(), g.file_log_count(), 1);
        settler.cleared_lazily(Journal::Dir, 3);
        settler.cleared_lazily(Journal::File, 3);
        for slot in 1..LIMBO_MAX_ITEMS as u32 {
            assert!(!settler.hold(|limbo| limbo.pinodes.push(slot)));
        }
        assert!(settler.hold(|limbo| limbo.blocks.push((100, 4))), "full");
        assert_eq!(settler.held_blocks(), 4);
        let mut returned = 0;
        assert!(settler.settle_all(image, |limbo| returned = limbo.items()));
        assert_eq!(returned, LIMBO_MAX_ITEMS);
        for journal in [Journal::Dir, Journal::File] {
            assert!(
                !settler.is_unsettled(settler.index(journal, 3)),
                "settling everything settles every log of both journals"
            );
        }
        assert!(!settler.settle_all(image, |limbo| assert!(limbo.is_empty())));
        assert_eq!((settler.held_blocks(), settler.held_pinodes()), (0, 0));
    }
}
