//! One region's free runs of data blocks, indexed twice: by end, to merge a freed run with its
//! neighbours and to find the run holding a goal; and by length, to find a run of a given size
//! without walking the shorter ones.
//!
//! Why the second index: a region's free space after random page rewrites, punched holes or
//! deleted small files is tens of thousands of one-block runs, and a first fit walked them all
//! for every allocation of two blocks or more that had no goal (measured: 8 KiB overwrites +
//! fsync 2.6 us on a fresh image, 139-150 us with 50,000 one-block holes below the free space;
//! `scripts/free-space-holes.c`).
//!
//! Why by end: blocks are handed out from a run's start (a file's goal is the block after its
//! last, the start of the free run there; a fit takes a run's first blocks), and a run keyed by
//! its end keeps its key when its start moves: the run shrinks in place, and only the length
//! index changes (keyed by start, an allocation would remove and reinsert it in both).
//!
//! Invariants, checked by [`FreeRuns::check`] in tests: the two indexes hold the same runs;
//! runs are not empty and neither overlap nor touch (a freed run merges with its neighbours);
//! `blocks` is the sum of their lengths.

use std::collections::{BTreeMap, BTreeSet};

/// The free runs of one region.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct FreeRuns {
    /// end block (the first past the run) -> run length.
    by_end: BTreeMap<u64, u64>,
    /// (length, end) of every run: among runs of one length, the lowest first.
    by_len: BTreeSet<(u64, u64)>,
    /// Blocks in all runs.
    blocks: u64,
}

impl FreeRuns {
    /// Runs (start -> length) that neither overlap nor touch, as a bitmap's free space gives
    /// them.
    pub(super) fn from_runs(runs: BTreeMap<u64, u64>) -> FreeRuns {
        let by_end: BTreeMap<u64, u64> = runs.iter().map(|(&s, &len)| (s + len, len)).collect();
        let by_len = by_end.iter().map(|(&end, &len)| (len, end)).collect();
        FreeRuns {
            by_end,
            by_len,
            blocks: runs.values().sum(),
        }
    }

    /// Blocks in all runs.
    pub(super) fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The highest run: (start, length).
    pub(super) fn last(&self) -> Option<(u64, u64)> {
        self.by_end
            .iter()
            .next_back()
            .map(|(&end, &len)| (end - len, len))
    }

    fn insert(&mut self, end: u64, len: u64) {
        self.by_end.insert(end, len);
        self.by_len.insert((len, end));
        self.blocks += len;
    }

    fn remove(&mut self, end: u64, len: u64) {
        self.by_end.remove(&end);
        self.by_len.remove(&(len, end));
        self.blocks -= len;
    }

    /// The length index and the count after the run ending at `end` went from `old` blocks to
    /// `new` in the end index.
    fn resized(&mut self, end: u64, old: u64, new: u64) {
        self.by_len.remove(&(old, end));
        if new > 0 {
            self.by_len.insert((new, end));
        }
        self.blocks = self.blocks + new - old;
    }

    /// Adds `[start, start + count)`, merging with its neighbours. A double free is a broken
    /// invariant.
    ///
    /// One search finds both neighbours: the first two runs ending at or after `start` are the
    /// run before it (ending exactly at `start`), if there is one, and the next run, which
    /// continues it when it starts at its end.
    pub(super) fn free(&mut self, start: u64, count: u64) {
        let end = start + count;
        let mut after = self.by_end.range_mut(start..);
        let mut first = after.next();
        let prev_len = match &first {
            Some((&e, len)) if e == start => {
                let len = **len;
                first = after.next();
                Some(len)
            }
            _ => None,
        };
        let mut grown = None;
        if let Some((&next_end, len)) = first {
            let next_start = next_end - *len;
            assert!(next_start >= end, "double free in [{start}, +{count})");
            if next_start == end {
                // The next run grows down over this one (and the one before): its key stays.
                let old = *len;
                *len += count + prev_len.unwrap_or(0);
                grown = Some((next_end, old, *len));
            }
        }
        if let Some(len) = prev_len {
            self.remove(start, len);
        }
        match grown {
            Some((next_end, old, new)) => self.resized(next_end, old, new),
            None => self.insert(end, count + prev_len.unwrap_or(0)),
        }
    }

    /// `count` blocks from the shortest run that holds them (the lowest of those), or `None`.
    pub(super) fn take_fit(&mut self, count: u64) -> Option<u64> {
        let &(len, end) = self.by_len.range((count, 0)..).next()?;
        self.take_at(end - len, count).map(|(start, _)| start)
    }

    /// The longest run (the highest of those), whole: (start, length).
    pub(super) fn take_longest(&mut self) -> Option<(u64, u64)> {
        let &(len, end) = self.by_len.iter().next_back()?;
        self.remove(end, len);
        Some((end - len, len))
    }

    /// Up to `max` blocks from `goal` on, if `goal` is free: the run holding it keeps its end,
    /// shortened in place (one search of the end index), and the part before `goal`, if any,
    /// becomes a run of its own.
    pub(super) fn take_at(&mut self, goal: u64, max: u64) -> Option<(u64, u64)> {
        let (&end, len) = self.by_end.range_mut(goal + 1..).next()?;
        let old = *len;
        let start = end - old;
        if start > goal {
            return None;
        }
        let taken = (end - goal).min(max);
        let left = end - goal - taken;
        if left > 0 {
            *len = left;
        } else {
            self.by_end.remove(&end);
        }
        self.resized(end, old, left);
        if goal > start {
            self.insert(goal, goal - start);
        }
        Some((goal, taken))
    }

    /// The runs, start -> length (tests).
    #[cfg(test)]
    pub(super) fn as_map(&self) -> BTreeMap<u64, u64> {
        self.by_end
            .iter()
            .map(|(&end, &len)| (end - len, len))
            .collect()
    }

    /// Panics unless the invariants in the module doc hold.
    #[cfg(test)]
    pub(super) fn check(&self) {
        let by_len: BTreeSet<(u64, u64)> = self.by_end.iter().map(|(&e, &l)| (l, e)).collect();
        assert_eq!(by_len, self.by_len, "the indexes disagree");
        assert_eq!(
            self.blocks,
            self.by_end.values().sum::<u64>(),
            "block count"
        );
        let mut last_end = None;
        for (&end, &len) in &self.by_end {
            assert!(len > 0 && len <= end, "a run of {len} ending at {end}");
            let start = end - len;
            assert!(
                last_end.is_none_or(|e| e < start),
                "runs touch or overlap at {start}"
            );
            last_end = Some(end);
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
        FreeRuns::from_runs(BTreeMap::from([(10u64, 5u64), (20, 5)]))
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
        let mut runs =
            FreeRuns::from_runs(BTreeMap::from([(0, 1), (5, 3), (10, 2), (20, 2), (30, 9)]));
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
        let mut runs = FreeRuns::from_runs(BTreeMap::from([(10, 10), (30, 2)]));
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
    /// invariants, after every step.
    #[test]
    fn random_frees_and_takes_keep_the_free_space_of_a_bitmap() {
        const BLOCKS: usize = 512;
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut runs = FreeRuns::default();
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
            let (mut runs, mut free) = (FreeRuns::default(), [false; 256]);
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
        let mut runs = FreeRuns::default();
        runs.free(10, 5);
        runs.free(4, 7);
    }
}
