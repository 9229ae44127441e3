//! Two bit sets over a region's blocks, for [`super::runs::FreeRuns`]: [`Bits`], one flat bit per
//! block (free or not), and [`BitTree`], a set with its lowest and highest member found in a few
//! word reads (the region's one-block runs).
//!
//! Why bits and not more B-tree entries: after random page rewrites, a region's free space is
//! hundreds of thousands of one-block runs, and every rewrite frees one block at a random place
//! and takes one. In B-trees keyed by position each such step was three descents of six or seven
//! levels, each level a cache miss or two (measured: a quarter of a 4 KiB page rewrite + fsync
//! on a 2 GiB file). Here a block's bit is one word, and the tree's upper levels are a few
//! kilobytes that stay in the cache.
//!
//! Both are `vec![0; n]`: an allocation the kernel hands out as untouched zero pages, so a large
//! empty region costs memory only where bits are set.

/// Bits per word.
const WORD_BITS: u64 = 64;

/// One bit per position in `[0, len)`; set means free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bits {
    words: Vec<u64>,
    len: u64,
}

/// The mask of bits `[from, to)` within one word (`from < to <= 64`).
fn mask(from: u64, to: u64) -> u64 {
    debug_assert!(from < to && to <= WORD_BITS);
    let high = if to == WORD_BITS {
        u64::MAX
    } else {
        (1u64 << to) - 1
    };
    high & !((1u64 << from) - 1)
}

/// The words and in-word masks covering `[start, end)`.
fn spans(start: u64, end: u64) -> impl Iterator<Item = (usize, u64)> {
    let mut at = start;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let word = at / WORD_BITS;
        let to = end.min((word + 1) * WORD_BITS);
        let m = mask(at % WORD_BITS, to - word * WORD_BITS);
        at = to;
        Some((word as usize, m))
    })
}

impl Bits {
    /// `len` positions, none set.
    pub(super) fn new(len: u64) -> Bits {
        Bits {
            words: vec![0; len.div_ceil(WORD_BITS) as usize],
            len,
        }
    }

    /// Whether `i` is set; positions past the end are not.
    pub(super) fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / WORD_BITS) as usize] & (1 << (i % WORD_BITS)) != 0
    }

    /// Whether any of `[start, end)` is set.
    pub(super) fn any(&self, start: u64, end: u64) -> bool {
        assert!(end <= self.len, "[{start}, {end}) past {}", self.len);
        spans(start, end).any(|(w, m)| self.words[w] & m != 0)
    }

    /// Sets `[start, end)`.
    pub(super) fn set(&mut self, start: u64, end: u64) {
        assert!(end <= self.len, "[{start}, {end}) past {}", self.len);
        spans(start, end).for_each(|(w, m)| self.words[w] |= m);
    }

    /// Clears `[start, end)`.
    pub(super) fn clear(&mut self, start: u64, end: u64) {
        assert!(end <= self.len, "[{start}, {end}) past {}", self.len);
        spans(start, end).for_each(|(w, m)| self.words[w] &= !m);
    }

    /// How many positions from `i` on are set one after another, counting at most `limit`
    /// (positions past the end are clear).
    pub(super) fn ones_from(&self, i: u64, limit: u64) -> u64 {
        let (mut count, mut at) = (0, i);
        while count < limit && at < self.len {
            let word = self.words[(at / WORD_BITS) as usize] >> (at % WORD_BITS);
            let room = WORD_BITS - at % WORD_BITS;
            // The shift brought in clear bits above `room`, so this is at most `room`.
            let ones = u64::from((!word).trailing_zeros());
            count += ones;
            if ones < room {
                break;
            }
            at += room;
        }
        count.min(limit)
    }

    /// How many positions just below `i` (`i - 1`, `i - 2`, ...) are set one after another,
    /// counting at most `limit`.
    pub(super) fn ones_before(&self, i: u64, limit: u64) -> u64 {
        assert!(i <= self.len, "{i} past {}", self.len);
        let (mut count, mut end) = (0, i);
        while count < limit && end > 0 {
            let last = end - 1;
            let word =
                self.words[(last / WORD_BITS) as usize] << (WORD_BITS - 1 - last % WORD_BITS);
            let room = last % WORD_BITS + 1;
            // The shift brought in clear bits below `room`, so this is at most `room`.
            let ones = u64::from((!word).leading_zeros());
            count += ones;
            if ones < room {
                break;
            }
            end -= room;
        }
        count.min(limit)
    }

    /// How many positions are set (tests).
    #[cfg(test)]
    pub(super) fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

/// A set of positions in `[0, len)`: level 0 holds one bit per position, and each level above
/// one bit per word of the level below, set when that word is not zero, up to a level of one
/// word. Insert and remove touch one word per level (fewer when a word stays non-zero); the
/// lowest and highest member are found by one word per level from the top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BitTree {
    /// Level 0 first; the last has one word.
    levels: Vec<Vec<u64>>,
    len: u64,
}

impl BitTree {
    /// An empty set of positions in `[0, len)`.
    pub(super) fn new(len: u64) -> BitTree {
        let mut levels = Vec::new();
        let mut words = len.div_ceil(WORD_BITS).max(1);
        loop {
            levels.push(vec![0; words as usize]);
            if words == 1 {
                break;
            }
            words = words.div_ceil(WORD_BITS);
        }
        BitTree { levels, len }
    }

    /// Whether `i` is in the set.
    pub(super) fn contains(&self, i: u64) -> bool {
        i < self.len && self.levels[0][(i / WORD_BITS) as usize] & (1 << (i % WORD_BITS)) != 0
    }

    /// Adds `i`.
    pub(super) fn insert(&mut self, i: u64) {
        assert!(i < self.len, "{i} past {}", self.len);
        let mut at = i;
        for level in &mut self.levels {
            let word = &mut level[(at / WORD_BITS) as usize];
            let was = *word;
            *word |= 1 << (at % WORD_BITS);
            if was != 0 {
                return; // the levels above already say this word is not empty
            }
            at /= WORD_BITS;
        }
    }

    /// Removes `i`; whether it was there.
    pub(super) fn remove(&mut self, i: u64) -> bool {
        if !self.contains(i) {
            return false;
        }
        let mut at = i;
        for level in &mut self.levels {
            let word = &mut level[(at / WORD_BITS) as usize];
            *word &= !(1 << (at % WORD_BITS));
            if *word != 0 {
                break;
            }
            at /= WORD_BITS;
        }
        true
    }

    /// The lowest member.
    pub(super) fn min(&self) -> Option<u64> {
        self.descend(|word| u64::from(word.trailing_zeros()))
    }

    /// The highest member.
    pub(super) fn max(&self) -> Option<u64> {
        self.descend(|word| u64::from(63 - word.leading_zeros()))
    }

    /// From the top word down, the bit `pick` chooses in each non-zero word.
    fn descend(&self, pick: impl Fn(u64) -> u64) -> Option<u64> {
        let mut at = 0u64;
        for level in self.levels.iter().rev() {
            let word = level[at as usize];
            if word == 0 {
                debug_assert!(at == 0, "an upper level names an empty word");
                return None;
            }
            at = at * WORD_BITS + pick(word);
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn ranges_set_and_clear_exactly_their_bits_across_words() {
        for (start, end) in [(0, 1), (3, 64), (63, 65), (0, 200), (64, 128), (70, 71)] {
            let mut bits = Bits::new(200);
            bits.set(start, end);
            assert_eq!(bits.count(), end - start, "[{start}, {end})");
            for i in 0..200 {
                assert_eq!(
                    bits.get(i),
                    (start..end).contains(&i),
                    "{i} of [{start}, {end})"
                );
            }
            assert!(bits.any(start, end) && !bits.any(end, 200) && !bits.any(0, start));
            bits.clear(start + 1, end);
            assert_eq!(bits.count(), 1);
        }
        assert!(!Bits::new(10).get(10), "past the end reads as clear");
    }

    #[test]
    fn runs_of_set_bits_are_counted_both_ways_across_words_up_to_a_limit() {
        let mut bits = Bits::new(300);
        for (start, end) in [(0, 3), (60, 70), (127, 129), (200, 300)] {
            bits.set(start, end);
        }
        let walk_from = |i: u64| (i..300).take_while(|&j| bits.get(j)).count() as u64;
        let walk_before = |i: u64| (0..i).rev().take_while(|&j| bits.get(j)).count() as u64;
        for i in 0..=300 {
            for limit in [1, 2, 5, 64, 200] {
                if i < 300 {
                    assert_eq!(
                        bits.ones_from(i, limit),
                        walk_from(i).min(limit),
                        "from {i}"
                    );
                }
                assert_eq!(
                    bits.ones_before(i, limit),
                    walk_before(i).min(limit),
                    "before {i}"
                );
            }
        }
    }

    #[test]
    fn the_tree_keeps_a_set_and_its_ends_at_every_size() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in [1, 63, 64, 65, 4096, 4097, 300_000] {
            let (mut tree, mut model) = (BitTree::new(len), BTreeSet::new());
            for _ in 0..5_000 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // Clustered positions, so words empty and fill again.
                let i = (seed >> 8) % len.min(3_000) * (len / 3_000).max(1) % len;
                if seed % 3 == 0 {
                    assert_eq!(tree.remove(i), model.remove(&i), "remove {i}");
                } else {
                    tree.insert(i);
                    model.insert(i);
                }
                assert_eq!(tree.min(), model.first().copied(), "len {len}");
                assert_eq!(tree.max(), model.last().copied(), "len {len}");
                assert_eq!(tree.contains(i), model.contains(&i));
            }
            while let Some(i) = tree.min() {
                assert!(tree.remove(i));
                assert_eq!(model.pop_first(), Some(i));
            }
            assert!(model.is_empty() && tree.max().is_none());
        }
    }
}
