//! One region's free runs of data blocks: runs of two blocks or more indexed twice, by end (to
//! merge a freed run with its neighbours and to find the run holding a goal) and by length (to
//! find a run of a given size without walking the shorter ones); one-block runs in a bit tree;
//! and one bit per block saying whether it is free ([`super::bits`]).
//!
//! Why the length index: a region's free space after random page rewrites, punched holes or
//! deleted small files is tens of thousands of one-block runs, and a first fit walked them all
//! for every allocation of two blocks or more that had no goal (measured: 8 KiB overwrites +
//! fsync 2.6 us on a fresh image, 139-150 us with 50,000 one-block holes below the free space;
//! `scripts/free-space-holes.c`).
//!
//! Why one-block runs apart, in bits: random page rewrites free one block at a random place and
//! take one, hundreds of thousands of times over a large file. As B-tree entries, each step was
//! three descents through trees of that many entries, a cache miss or two per level; as bits, a
//! free whose neighbours are in use sets two words and a take of the lowest one-block run reads
//! a few (measured with `FILE_MIB=2048 overwrite_profile aligned4096`: docs/benchmarks.md).
//! The per-block bits also answer "is this block free" (a goal, a neighbour, a double free)
//! without a search.
//!
//! Why by end: blocks are handed out from a run's start (a file's goal is the block after its
//! last, the start of the free run there; a fit takes a run's first blocks), and a run keyed by
//! its end keeps its key when its start moves: the run shrinks in place, and only the length
//! index changes.
//!
//! Invariants, checked by [`FreeRuns::check`] in tests: the two indexes hold the same runs,
//! each of two blocks or more; the bit tree holds the one-block runs; runs neither overlap nor
//! touch (a freed run merges with its neighbours); the free bits are exactly the runs' blocks,
//! and `blocks` counts them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::bits::{BitTree, Bits};

/// The free runs of one region, blocks `[first, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FreeRuns {
    /// The region's first block: bit `i` below is block `first + i`.
    first: u64,
    /// Runs of two blocks or more: end block (the first past the run) -> run length.
    by_end: BTreeMap<u64, u64>,
    /// (length, end) of every run in `by_end`: among runs of one length, the lowest first.
    by_len: BTreeSet<(u64, u64)>,
    /// One-block runs.
    singles: BitTree,
    /// Free blocks.
    free: Bits,
    /// Blocks in all runs.
    blocks: u64,
}

impl FreeRuns {
    /// No free blocks in `span`.
    pub(super) fn new(span: Range<u64>) -> FreeRuns {
        let len = span.end - span.start;
        FreeRuns {
            first: span.start,
            by_end: BTreeMap::new(),
            by_len: BTreeSet::new(),
            singles: BitTree::new(len),
            free: Bits::new(len),
            blocks: 0,
        }
    }

    /// Runs (start -> length) inside `span` that neither overlap nor touch, as a bitmap's free
    /// space gives them.
    pub(super) fn from_runs(span: Range<u64>, runs: &BTreeMap<u64, u64>) -> FreeRuns {
        let mut free = FreeRuns::new(span);
        for (&start, &len) in runs {
            free.free(start, len);
        }
        free
    }

    /// Blocks in all runs.
    pub(super) fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Whether `block` is free.
    fn is_free(&self, block: u64) -> bool {
        block >= self.first && self.free.get(block - self.first)
    }

    /// Records the run `[start, start + len)` in the index its length belongs to.
    fn insert_run(&mut self, start: u64, len: u64) {
        debug_assert!(len > 0);
        if len == 1 {
            self.singles.insert(start - self.first);
        } else {
            self.by_end.insert(start + len, len);
            self.by_len.insert((len, start + len));
        }
    }

    /// Forgets the run of two blocks or more ending at `end`: its length.
    fn remove_long(&mut self, end: u64) -> u64 {
        let len = self.by_end.remove(&end).expect("a free block ends a run");
        self.by_len.remove(&(len, end));
        len
    }

    /// Marks `[start, end)` as handed out.
    fn handed_out(&mut self, start: u64, end: u64) {
        self.free.clear(start - self.first, end - self.first);
        self.blocks -= end - start;
    }

    /// Adds `[start, start + count)`, merging with its neighbours. A double free is a broken
    /// invariant.
    pub(super) fn free(&mut self, start: u64, count: u64) {
        let end = start + count;
        assert!(
            start >= self.first && !self.free.any(start - self.first, end - self.first),
            "double free in [{start}, +{count})"
        );
        let mut run_start = start;
        if self.is_free(start.wrapping_sub(1)) {
            run_start -= if self.singles.remove(start - 1 - self.first) {
                1
            } else {
                self.remove_long(start)
            };
        }
        self.free.set(start - self.first, end - self.first);
        self.blocks += count;
        let mut run_end = end;
        if self.is_free(end) {
            if self.singles.remove(end - self.first) {
                run_end = end + 1;
            } else {
                // The run after grows down over this one (and the one before): its key, its
                // end, stays, so only its length changes, in place.
                let (&next_end, len) = self.by_end.range_mut(end + 1..).next().expect("a run");
                let old = *len;
                assert_eq!(next_end - old, end, "a free block starts a run");
                *len = next_end - run_start;
                let new = *len;
                self.by_len.remove(&(old, next_end));
                self.by_len.insert((new, next_end));
                return;
            }
        }
        self.insert_run(run_start, run_end - run_start);
    }

    /// `count` blocks from the shortest run that holds them (the lowest of those), or `None`.
    pub(super) fn take_fit(&mut self, count: u64) -> Option<u64> {
        if count == 1 {
            if let Some(i) = self.singles.min() {
                self.singles.remove(i);
                let block = self.first + i;
                self.handed_out(block, block + 1);
                return Some(block);
            }
        }
        let &(len, end) = self.by_len.range((count, 0)..).next()?;
        self.take_at(end - len, count).map(|(start, _)| start)
    }

    /// The longest run (the highest of those), whole: (start, length).
    pub(super) fn take_longest(&mut self) -> Option<(u64, u64)> {
        let (start, len) = match self.by_len.iter().next_back() {
            Some(&(len, end)) => {
                self.remove_long(end);
                (end - len, len)
            }
            None => {
                let i = self.singles.max()?;
                self.singles.remove(i);
                (self.first + i, 1)
            }
        };
        self.handed_out(start, start + len);
        Some((start, len))
    }

    /// Up to `max` blocks from `goal` on, if `goal` is free: a run of two blocks or more holding
    /// it keeps its end, shortened in place (one search of the end index), and the part before
    /// `goal`, if any, becomes a run of its own.
    pub(super) fn take_at(&mut self, goal: u64, max: u64) -> Option<(u64, u64)> {
        if !self.is_free(goal) {
            return None;
        }
        // A one-block run has no free neighbour; asked of the bits (the goal's word, which an
        // append's long run at the frontier keeps in the cache) before the bit tree.
        if !self.is_free(goal + 1) && !self.is_free(goal.wrapping_sub(1)) {
            assert!(self.singles.remove(goal - self.first), "a lone free block");
            self.handed_out(goal, goal + 1);
            return Some((goal, 1));
        }
        let (&end, len) = self.by_end.range_mut(goal + 1..).next().expect("a run");
        let old = *len;
        let start = end - old;
        assert!(start <= goal, "a free block lies in the run after it");
        let taken = (end - goal).min(max);
        let left = end - goal - taken;
        if left >= 2 {
            *len = left;
            self.by_len.remove(&(old, end));
            self.by_len.insert((left, end));
        } else {
            self.remove_long(end);
            if left == 1 {
                self.singles.insert(end - 1 - self.first);
            }
        }
        if goal > start {
            self.insert_run(start, goal - start);
        }
        self.handed_out(goal, goal + taken);
        Some((goal, taken))
    }

    /// The runs, start -> length (tests).
    #[cfg(test)]
    pub(super) fn as_map(&self) -> BTreeMap<u64, u64> {
        let mut singles = self.singles.clone();
        let mut runs: BTreeMap<u64, u64> = self
            .by_end
            .iter()
            .map(|(&end, &len)| (end - len, len))
            .collect();
        while let Some(i) = singles.min() {
            singles.remove(i);
            runs.insert(self.first + i, 1);
        }
        runs
    }

    /// Panics unless the invariants in the module doc hold.
    #[cfg(test)]
    pub(super) fn check(&self) {
        let by_len: BTreeSet<(u64, u64)> = self.by_end.iter().map(|(&e, &l)| (l, e)).collect();
        assert_eq!(by_len, self.by_len, "the indexes disagree");
        assert!(self.by_end.values().all(|&len| len >= 2), "a short run");
        let runs = self.as_map();
        assert_eq!(self.blocks, runs.values().sum::<u64>(), "block count");
        assert_eq!(self.blocks, self.free.count(), "free bits");
        let mut last_end = None;
        for (&start, &len) in &runs {
            assert!(
                last_end.is_none_or(|e| e < start),
                "runs touch or overlap at {start}"
            );
            assert!(
                (start..start + len).all(|b| self.is_free(b)),
                "a run's blocks are free"
            );
            last_end = Some(start + len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift generator.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// The maximal runs of a bitmap of free blocks, start -> length.
    fn runs_of(free: &[bool]) -> BTreeMap<u64, u64> {
        let mut runs = BTreeMap::new();
        let mut b = 0;
        while b < free.len() {
            if !free[b] {
                b += 1;
                continue;
            }
            let s = b;
            while b < free.len() && free[b] {
                b += 1;
            }
            runs.insert(s as u64, (b - s) as u64);
        }
        runs
    }

    fn two_runs() -> FreeRuns {
        FreeRuns::from_runs(0..64, &BTreeMap::from([(10u64, 5u64), (20, 5)]))
    }

    #[test]
    fn every_overlap_with_a_free_run_is_refused_and_every_neighbour_merges() {
        for (start, count) in [
            (12, 1),
            (9, 2),
            (14, 3),
            (8, 20),
            (15, 6),
            (19, 2),
            (20, 5),
            (24, 1),
            (10, 5),
            (0, 11),
            (14, 7),
        ] {
            let refused = std::panic::catch_unwind(|| two_runs().free(start, count));
            assert!(refused.is_err(), "[{start}, +{count}) overlaps a free run");
        }
        for (start, count, expected) in [
            (15, 5, vec![(10, 15)]),
            (5, 5, vec![(5, 10), (20, 5)]),
            (25, 3, vec![(10, 5), (20, 8)]),
            (16, 2, vec![(10, 5), (16, 2), (20, 5)]),
            (15, 2, vec![(10, 7), (20, 5)]),
            (18, 2, vec![(10, 5), (18, 7)]),
            (0, 3, vec![(0, 3), (10, 5), (20, 5)]),
        ] {
            let mut runs = two_runs();
            runs.free(start, count);
            runs.check();
            assert_eq!(
                runs.as_map(),
                BTreeMap::from_iter(expected),
                "[{start}, +{count})"
            );
        }
    }

    #[test]
    fn a_fit_is_the_shortest_run_that_holds_it_and_the_lowest_of_those() {
        let mut runs = FreeRuns::from_runs(
            0..64,
            &BTreeMap::from([(0, 1), (5, 3), (10, 2), (20, 2), (30, 9)]),
        );
        assert_eq!(runs.take_fit(2), Some(10));
        assert_eq!(runs.take_fit(2), Some(20));
        assert_eq!(runs.take_fit(2), Some(5), "the 3-block run, its first two");
        assert_eq!(runs.take_fit(2), Some(30));
        assert_eq!(runs.take_fit(8), None, "7 blocks are left at 32");
        assert_eq!(runs.take_longest(), Some((32, 7)));
        assert_eq!(runs.take_fit(1), Some(0));
        assert_eq!(runs.take_fit(1), Some(7));
        assert_eq!(runs.take_fit(1), None);
        runs.check();
        assert_eq!(runs.blocks(), 0);
    }

    #[test]
    fn a_goal_inside_a_run_splits_it_and_one_past_it_finds_nothing() {
        let mut runs = FreeRuns::from_runs(0..64, &BTreeMap::from([(10, 10), (30, 2)]));
        assert_eq!(runs.take_at(14, 3), Some((14, 3)));
        assert_eq!(runs.as_map(), BTreeMap::from([(10, 4), (17, 3), (30, 2)]));
        assert_eq!(
            runs.take_at(17, 8),
            Some((17, 3)),
            "what is left of the run"
        );
        assert_eq!(runs.take_at(20, 1), None);
        assert_eq!(runs.take_at(30, 2), Some((30, 2)));
        assert_eq!(runs.take_at(5, 1), None, "below every run");
        runs.check();
        assert_eq!(runs.blocks(), 4);
    }

    /// A seeded mix of frees and takes against a bitmap model: the same free space, and the
    /// invariants, after every step; each fit the shortest run that holds it, the lowest of
    /// those.
    #[test]
    fn random_frees_and_takes_keep_the_free_space_of_a_bitmap() {
        const BLOCKS: usize = 512;
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut runs = FreeRuns::new(0..BLOCKS as u64);
        let mut free = [false; BLOCKS];
        for _ in 0..20_000 {
            let count = 1 + next() % 6;
            match next() % 4 {
                0 | 1 => {
                    let start = next() % (BLOCKS as u64 - count);
                    let span = start as usize..(start + count) as usize;
                    if free[span.clone()].iter().any(|&f| f) {
                        continue;
                    }
                    runs.free(start, count);
                    free[span].fill(true);
                }
                2 => match runs.take_fit(count) {
                    Some(start) => {
                        let best = runs_of(&free)
                            .into_iter()
                            .filter(|&(_, len)| len >= count)
                            .min_by_key(|&(start, len)| (len, start));
                        assert_eq!(best.map(|b| b.0), Some(start), "the best fit");
                        let span = start as usize..(start + count) as usize;
                        assert!(free[span.clone()].iter().all(|&f| f), "took used blocks");
                        free[span].fill(false);
                    }
                    None => assert!(
                        !free.windows(count as usize).any(|w| w.iter().all(|&f| f)),
                        "{count} free blocks in a row were there"
                    ),
                },
                _ => {
                    let goal = next() % BLOCKS as u64;
                    if let Some((at, n)) = runs.take_at(goal, count) {
                        assert_eq!(at, goal);
                        let span = at as usize..(at + n) as usize;
                        assert!(free[span.clone()].iter().all(|&f| f), "took used blocks");
                        free[span].fill(false);
                    } else {
                        assert!(!free[goal as usize], "a free goal was refused");
                    }
                }
            }
            runs.check();
            assert_eq!(runs.as_map(), runs_of(&free));
        }
    }

    #[test]
    fn freed_runs_merge_as_the_free_space_they_describe_in_any_order() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..100 {
            let mut pieces = Vec::new();
            let mut block = 0;
            while block < 256 {
                let n = (1 + next() % 3).min(256 - block);
                pieces.push((block, n));
                block += n;
            }
            for i in (1..pieces.len()).rev() {
                pieces.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            let (mut runs, mut free) = (FreeRuns::new(0..256), [false; 256]);
            for (start, n) in pieces {
                runs.free(start, n);
                free[start as usize..(start + n) as usize].fill(true);
                runs.check();
                assert_eq!(runs.as_map(), runs_of(&free));
            }
        }
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn a_run_freed_twice_in_part_is_a_broken_invariant() {
        let mut runs = FreeRuns::new(0..64);
        runs.free(10, 5);
        runs.free(4, 7);
    }
}
