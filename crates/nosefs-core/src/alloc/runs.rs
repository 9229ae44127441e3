//! One region's free runs of data blocks: runs of up to [`SHORT_MAX`] blocks in bit trees, one
//! per length; longer runs indexed twice, by end (to find the run holding a goal and the run a
//! freed one merges with) and by length (to find a run of a given size without walking the
//! shorter ones); and one bit per block saying whether it is free ([`super::bits`]).
//!
//! Why the length index: a region's free space after random page rewrites, punched holes or
//! deleted small files is tens of thousands of short runs, and a first fit walked them all for
//! every allocation of two blocks or more that had no goal (measured: 8 KiB overwrites + fsync
//! 2.6 us on a fresh image, 139-150 us with 50,000 one-block holes below the free space;
//! `scripts/free-space-holes.c`).
//!
//! Why short runs apart, in bits: random page rewrites free one block at a random place and take
//! one, hundreds of thousands of times over a large file, and the freed blocks, as they thicken,
//! merge into runs of two, three, four blocks. As B-tree entries, each such step was several
//! descents through trees of that many entries, a cache miss or two per level; in bits, a free
//! reads its neighbours' bits (which also give a short run's bounds), and a fit takes the lowest
//! member of the tree of the shortest length that holds it, a few words each (measured with
//! `FILE_MIB=2048 overwrite_profile aligned4096`: docs/benchmarks.md). Runs longer than
//! [`SHORT_MAX`] are rare in such free space and common where it is not fragmented (the frontier,
//! a deleted file), where the B-trees are small.
//!
//! Why by end: blocks are handed out from a run's start (a file's goal is the block after its
//! last, the start of the free run there; a fit takes a run's first blocks), and a run keyed by
//! its end keeps its key when its start moves: the run shrinks in place, and only the length
//! index changes.
//!
//! Invariants, checked by [`FreeRuns::check`] in tests: the two indexes hold the same runs, each
//! longer than [`SHORT_MAX`]; the bit tree of length `k` holds the starts of the runs of `k`
//! blocks; runs neither overlap nor touch (a freed run merges with its neighbours); the free
//! bits are exactly the runs' blocks, and `blocks` counts them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::bits::{BitTree, Bits};

/// Runs of up to this many blocks live in bit trees ([`FreeRuns::short`]). After random
/// one-block frees of half a region, runs of five blocks or more are 3% of the runs.
const SHORT_MAX: u64 = 4;

/// The free runs of one region, blocks `[first, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FreeRuns {
    /// The region's first block: bit `i` below is block `first + i`.
    first: u64,
    /// Runs longer than [`SHORT_MAX`]: end block (the first past the run) -> run length.
    by_end: BTreeMap<u64, u64>,
    /// (length, end) of every run in `by_end`: among runs of one length, the lowest first.
    by_len: BTreeSet<(u64, u64)>,
    /// `short[k - 1]`: the starts of the runs of exactly `k` blocks, `k` up to [`SHORT_MAX`].
    short: Vec<BitTree>,
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
            short: (0..SHORT_MAX).map(|_| BitTree::new(len)).collect(),
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

    /// The run holding free block `b`, `(start, end)`, when it is short (read from the bits);
    /// `None` when it is longer than [`SHORT_MAX`] (then the B-trees have it).
    fn short_run_holding(&self, b: u64) -> Option<(u64, u64)> {
        let i = b - self.first;
        let below = self.free.ones_before(i, SHORT_MAX);
        let from = self.free.ones_from(i, SHORT_MAX + 1 - below);
        debug_assert!(from > 0, "block {b} is not free");
        // Both counts stopped at a block in use, not at their limits, exactly when they sum to
        // at most SHORT_MAX.
        (below + from <= SHORT_MAX).then_some((b - below, b + from))
    }

    /// The run holding free block `b`: `(start, end)`.
    fn run_holding(&self, b: u64) -> (u64, u64) {
        self.short_run_holding(b).unwrap_or_else(|| {
            let (&end, &len) = self.by_end.range(b + 1..).next().expect("a run holds it");
            assert!(end - len <= b, "a free block lies in the run after it");
            (end - len, end)
        })
    }

    /// Records the run `[start, start + len)` in the index its length belongs to.
    fn insert_run(&mut self, start: u64, len: u64) {
        debug_assert!(len > 0);
        if len <= SHORT_MAX {
            self.short[len as usize - 1].insert(start - self.first);
        } else {
            self.by_end.insert(start + len, len);
            self.by_len.insert((len, start + len));
        }
    }

    /// Forgets the run `[start, end)`.
    fn remove_run(&mut self, start: u64, end: u64) {
        let len = end - start;
        if len <= SHORT_MAX {
            let present = self.short[len as usize - 1].remove(start - self.first);
            assert!(present, "a short run [{start}, {end}) is recorded");
        } else {
            assert_eq!(self.by_end.remove(&end), Some(len), "a run ends at {end}");
            self.by_len.remove(&(len, end));
        }
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
        // The neighbours' runs, found before the bits change (a short one's bounds are read
        // from them).
        let before = self
            .is_free(start.wrapping_sub(1))
            .then(|| self.run_holding(start - 1));
        let after = self.is_free(end).then(|| self.run_holding(end));
        self.free.set(start - self.first, end - self.first);
        self.blocks += count;
        let run_start = before.map_or(start, |(s, _)| s);
        if let Some((s, e)) = before {
            self.remove_run(s, e);
        }
        match after {
            Some((_, next_end)) if next_end - end > SHORT_MAX => {
                // The run after grows down over this one (and the one before): its key, its
                // end, stays, so only its length changes, in place.
                let len = self.by_end.get_mut(&next_end).expect("a long run");
                let old = *len;
                *len = next_end - run_start;
                let new = *len;
                self.by_len.remove(&(old, next_end));
                self.by_len.insert((new, next_end));
            }
            Some((s, e)) => {
                self.remove_run(s, e);
                self.insert_run(run_start, e - run_start);
            }
            None => self.insert_run(run_start, end - run_start),
        }
    }

    /// `count` blocks from the shortest run that holds them (the lowest of those), or `None`.
    pub(super) fn take_fit(&mut self, count: u64) -> Option<u64> {
        for len in count.max(1)..=SHORT_MAX {
            let tree = &mut self.short[len as usize - 1];
            if let Some(i) = tree.min() {
                tree.remove(i);
                let start = self.first + i;
                if len > count {
                    self.insert_run(start + count, len - count);
                }
                self.handed_out(start, start + count);
                return Some(start);
            }
        }
        let &(len, end) = self.by_len.range((count.max(SHORT_MAX + 1), 0)..).next()?;
        self.take_at(end - len, count).map(|(start, _)| start)
    }

    /// The longest run (the highest of those), whole: (start, length).
    pub(super) fn take_longest(&mut self) -> Option<(u64, u64)> {
        let (start, len) = match self.by_len.iter().next_back() {
            Some(&(len, end)) => (end - len, len),
            None => (1..=SHORT_MAX).rev().find_map(|len| {
                let i = self.short[len as usize - 1].max()?;
                Some((self.first + i, len))
            })?,
        };
        self.remove_run(start, start + len);
        self.handed_out(start, start + len);
        Some((start, len))
    }

    /// Up to `max` blocks from `goal` on, if `goal` is free: a long run holding it keeps its end,
    /// shortened in place while what is left of it stays long (one search of the end index), and
    /// the part before `goal`, if any, becomes a run of its own.
    pub(super) fn take_at(&mut self, goal: u64, max: u64) -> Option<(u64, u64)> {
        if !self.is_free(goal) {
            return None;
        }
        let (start, end, taken) = match self.short_run_holding(goal) {
            Some((start, end)) => {
                self.remove_run(start, end);
                let taken = (end - goal).min(max);
                if goal + taken < end {
                    self.insert_run(goal + taken, end - goal - taken);
                }
                (start, end, taken)
            }
            None => {
                let (&end, len) = self.by_end.range_mut(goal + 1..).next().expect("a run");
                let old = *len;
                let start = end - old;
                assert!(start <= goal, "a free block lies in the run after it");
                let taken = (end - goal).min(max);
                let left = end - goal - taken;
                if left > SHORT_MAX {
                    *len = left;
                    self.by_len.remove(&(old, end));
                    self.by_len.insert((left, end));
                } else {
                    self.remove_run(start, end);
                    if left > 0 {
                        self.insert_run(end - left, left);
                    }
                }
                (start, end, taken)
            }
        };
        debug_assert!(goal + taken <= end);
        if goal > start {
            self.insert_run(start, goal - start);
        }
        self.handed_out(goal, goal + taken);
        Some((goal, taken))
    }

    /// The runs, start -> length (tests).
    #[cfg(test)]
    pub(super) fn as_map(&self) -> BTreeMap<u64, u64> {
        let mut runs: BTreeMap<u64, u64> = self
            .by_end
            .iter()
            .map(|(&end, &len)| (end - len, len))
            .collect();
        for (k, tree) in self.short.iter().enumerate() {
            let mut tree = tree.clone();
            while let Some(i) = tree.min() {
                tree.remove(i);
                assert!(runs.insert(self.first + i, k as u64 + 1).is_none(), "twice");
            }
        }
        runs
    }

    /// Panics unless the invariants in the module doc hold.
    #[cfg(test)]
    pub(super) fn check(&self) {
        let by_len: BTreeSet<(u64, u64)> = self.by_end.iter().map(|(&e, &l)| (l, e)).collect();
        assert_eq!(by_len, self.by_len, "the indexes disagree");
        assert!(
            self.by_end.values().all(|&len| len > SHORT_MAX),
            "a short run in the B-trees"
        );
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
    /// those; each longest run taken the highest of those.
    #[test]
    fn random_frees_and_takes_keep_the_free_space_of_a_bitmap() {
        const BLOCKS: usize = 512;
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut runs = FreeRuns::new(0..BLOCKS as u64);
        let mut free = [false; BLOCKS];
        for _ in 0..20_000 {
            let count = 1 + next() % 6;
            match next() % 9 {
                8 => {
                    let longest = runs_of(&free)
                        .into_iter()
                        .max_by_key(|&(start, len)| (len, start));
                    assert_eq!(runs.take_longest(), longest, "the longest run, the highest");
                    if let Some((start, len)) = longest {
                        free[start as usize..(start + len) as usize].fill(false);
                    }
                }
                0..=3 => {
                    let start = next() % (BLOCKS as u64 - count);
                    let span = start as usize..(start + count) as usize;
                    if free[span.clone()].iter().any(|&f| f) {
                        continue;
                    }
                    runs.free(start, count);
                    free[span].fill(true);
                }
                4 | 5 => match runs.take_fit(count) {
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
