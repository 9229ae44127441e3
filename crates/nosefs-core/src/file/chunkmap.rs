//! A sorted map from `u64` keys to small `Copy` values, stored as a list of sorted chunks: the
//! per-file piece index ([`super::filemap::FileMap`]).
//!
//! Why not `BTreeMap`: a file fragmented by random small overwrites holds tens of thousands of
//! pieces, and every overwrite + fsync looks pieces up some thirty times at random offsets. A
//! `BTreeMap` of that size is five levels of 11-key nodes, each level a few cache lines away from
//! the last, so a lookup costs a dozen or more cache misses when cold and tens of nanoseconds
//! of pointer chasing when warm. Here a lookup is a binary search in one flat array of the
//! chunks' first keys (a few KiB, which stays in the cache because every lookup uses it), then a
//! binary search in one chunk's key array: two or three cold lines. Inserting or removing moves
//! at most [`CHUNK_MAX`] entries of one chunk.
//!
//! Invariants, checked by [`ChunkMap::check`] in tests:
//! - every chunk holds 1 to [`CHUNK_MAX`] entries, keys strictly ascending within it and across
//!   chunks;
//! - `firsts[c]` is the first key of chunk `c`;
//! - `len` is the total number of entries.

/// Most entries in one chunk; a chunk that grows past it is split in two halves.
pub const CHUNK_MAX: usize = 64;
/// A chunk that shrinks below this is merged with a neighbour when both fit in one chunk, so
/// the number of chunks stays proportional to the number of entries.
const CHUNK_MERGE_BELOW: usize = CHUNK_MAX / 4;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Chunk<V> {
    keys: Vec<u64>,
    vals: Vec<V>,
}

impl<V: Copy> Chunk<V> {
    fn len(&self) -> usize {
        self.keys.len()
    }
}

/// The map. See the module doc.
#[derive(Debug, Clone)]
pub struct ChunkMap<V> {
    firsts: Vec<u64>,
    chunks: Vec<Chunk<V>>,
    len: usize,
    /// The allocation of the last chunk that emptied, cleared, for the next chunk made: a file
    /// appended to and synced over and over empties its map at every commit (its one piece and
    /// the pending one are replaced by their merge) and fills it again, and two fresh vectors
    /// per commit, grown by the next write, were a tenth of a small append + fsync.
    spare: Option<Chunk<V>>,
    /// Where the last [`HINTS`] exact searches found their keys, the newest replacing the
    /// oldest. A commit looks the same few pieces up again and again (the write's, then the
    /// merge's, the move's and the links' lookups), each a cache miss or two in a large map, and
    /// a database commits several pages at once (LMDB: four); a hint is checked by its key
    /// alone, so no change to the map has to keep it right.
    hints: std::cell::Cell<[Pos; HINTS]>,
    /// The hint the next search replaces.
    next_hint: std::cell::Cell<usize>,
}

/// Positions a map remembers ([`ChunkMap::hints`]).
const HINTS: usize = 4;

impl<V> Default for ChunkMap<V> {
    fn default() -> Self {
        ChunkMap {
            firsts: Vec::new(),
            chunks: Vec::new(),
            len: 0,
            spare: None,
            hints: std::cell::Cell::new([(0, 0); HINTS]),
            next_hint: std::cell::Cell::new(0),
        }
    }
}

/// Equal entries; the spare allocation is no part of the contents.
impl<V: PartialEq> PartialEq for ChunkMap<V> {
    fn eq(&self, other: &Self) -> bool {
        (&self.firsts, &self.chunks, self.len) == (&other.firsts, &other.chunks, other.len)
    }
}

impl<V: Eq> Eq for ChunkMap<V> {}

/// A position: chunk index and index in the chunk.
type Pos = (usize, usize);

impl<V: Copy> ChunkMap<V> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk a key belongs in: the last one whose first key is at most `key`, or the first
    /// chunk when `key` precedes every key. The map must not be empty.
    fn chunk_for(&self, key: u64) -> usize {
        self.firsts.partition_point(|&f| f <= key).saturating_sub(1)
    }

    /// The position of the first entry with a key `> key`; `None` past the last entry.
    fn seek_after(&self, key: u64) -> Option<Pos> {
        if self.is_empty() {
            return None;
        }
        let c = self.chunk_for(key);
        let i = self.chunks[c].keys.partition_point(|&k| k <= key);
        self.normalize((c, i))
    }

    /// `pos`, or the start of the next chunk when `pos` is one past its chunk's end.
    fn normalize(&self, (c, i): Pos) -> Option<Pos> {
        if i < self.chunks[c].len() {
            Some((c, i))
        } else if c + 1 < self.chunks.len() {
            Some((c + 1, 0))
        } else {
            None
        }
    }

    fn at(&self, (c, i): Pos) -> (u64, V) {
        let chunk = &self.chunks[c];
        (chunk.keys[i], chunk.vals[i])
    }

    fn find(&self, key: u64) -> Option<Pos> {
        if let Some(pos) = self.hinted(key) {
            return Some(pos);
        }
        if self.is_empty() {
            return None;
        }
        let c = self.chunk_for(key);
        let i = self.chunks[c].keys.binary_search(&key).ok()?;
        let mut hints = self.hints.get();
        let next = self.next_hint.get();
        hints[next] = (c, i);
        self.hints.set(hints);
        self.next_hint.set((next + 1) % HINTS);
        Some((c, i))
    }

    /// A hint's position, if `key` is there.
    fn hinted(&self, key: u64) -> Option<Pos> {
        self.hints.get().into_iter().find(|&(c, i)| {
            self.chunks
                .get(c)
                .and_then(|chunk| chunk.keys.get(i))
                .is_some_and(|&here| here == key)
        })
    }

    /// The position before `(c, i)`; `None` at the first entry.
    fn prev(&self, (c, i): Pos) -> Option<Pos> {
        if i > 0 {
            Some((c, i - 1))
        } else if c > 0 {
            Some((c - 1, self.chunks[c - 1].len() - 1))
        } else {
            None
        }
    }

    /// The value at exactly `key`.
    pub fn get(&self, key: u64) -> Option<V> {
        self.find(key).map(|p| self.at(p).1)
    }

    /// The value at exactly `key`, to change in place.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let (c, i) = self.find(key)?;
        Some(&mut self.chunks[c].vals[i])
    }

    /// Inserts or replaces the value at `key`; returns the one replaced.
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if self.is_empty() {
            let mut chunk = self.spare.take().unwrap_or_else(|| Chunk {
                keys: Vec::new(),
                vals: Vec::new(),
            });
            chunk.keys.push(key);
            chunk.vals.push(value);
            self.firsts.push(key);
            self.chunks.push(chunk);
            self.len = 1;
            return None;
        }
        let c = self.chunk_for(key);
        let chunk = &mut self.chunks[c];
        match chunk.keys.binary_search(&key) {
            Ok(i) => return Some(std::mem::replace(&mut chunk.vals[i], value)),
            Err(i) => {
                chunk.keys.insert(i, key);
                chunk.vals.insert(i, value);
            }
        }
        self.firsts[c] = chunk.keys[0];
        self.len += 1;
        if chunk.len() > CHUNK_MAX {
            self.split(c);
        }
        None
    }

    fn split(&mut self, c: usize) {
        let chunk = &mut self.chunks[c];
        let half = chunk.len() / 2;
        let upper = Chunk {
            keys: chunk.keys.split_off(half),
            vals: chunk.vals.split_off(half),
        };
        self.firsts.insert(c + 1, upper.keys[0]);
        self.chunks.insert(c + 1, upper);
    }

    /// Removes the entry at `key` and returns its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let (c, i) = self.find(key)?;
        let chunk = &mut self.chunks[c];
        chunk.keys.remove(i);
        let value = chunk.vals.remove(i);
        self.len -= 1;
        if chunk.keys.is_empty() {
            let emptied = self.chunks.remove(c);
            self.firsts.remove(c);
            self.spare.get_or_insert(emptied);
            return Some(value);
        }
        self.firsts[c] = chunk.keys[0];
        if chunk.len() < CHUNK_MERGE_BELOW {
            self.merge_around(c);
        }
        Some(value)
    }

    /// Merges small chunk `c` into a neighbour when the two fit in one chunk.
    fn merge_around(&mut self, c: usize) {
        let fits = |a: usize, b: usize| self.chunks[a].len() + self.chunks[b].len() <= CHUNK_MAX;
        let (left, right) = if c + 1 < self.chunks.len() && fits(c, c + 1) {
            (c, c + 1)
        } else if c > 0 && fits(c - 1, c) {
            (c - 1, c)
        } else {
            return;
        };
        let moved = self.chunks.remove(right);
        self.firsts.remove(right);
        let into = &mut self.chunks[left];
        into.keys.extend_from_slice(&moved.keys);
        into.vals.extend_from_slice(&moved.vals);
    }

    /// The entry with the largest key `< key`.
    pub fn before(&self, key: u64) -> Option<(u64, V)> {
        if let Some(pos) = self.hinted(key) {
            return self.prev(pos).map(|p| self.at(p));
        }
        self.range_from_before(key).next().filter(|&(k, _)| k < key)
    }

    /// The entry with the smallest key `> key`.
    pub fn after(&self, key: u64) -> Option<(u64, V)> {
        if let Some((c, i)) = self.hinted(key) {
            return self.normalize((c, i + 1)).map(|p| self.at(p));
        }
        self.seek_after(key).map(|p| self.at(p))
    }

    /// Entries in key order from the one with the largest key `< key` (or from the first entry
    /// when there is none): one search for what [`ChunkMap::before`] and a search for
    /// the first key `>= key` would find with two.
    pub fn range_from_before(&self, key: u64) -> impl Iterator<Item = (u64, V)> + '_ {
        if let Some(pos) = self.hinted(key) {
            return Iter {
                map: self,
                at: Some(self.prev(pos).unwrap_or(pos)),
            };
        }
        let at = (!self.is_empty()).then(|| {
            let c = self.firsts.partition_point(|&f| f < key).saturating_sub(1);
            let i = self.chunks[c].keys.partition_point(|&k| k < key);
            (c, i.saturating_sub(1))
        });
        Iter { map: self, at }
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        let at = (!self.is_empty()).then_some((0, 0));
        Iter { map: self, at }
    }

    /// The entry with the largest key.
    pub fn last(&self) -> Option<(u64, V)> {
        let c = self.chunks.len().checked_sub(1)?;
        Some(self.at((c, self.chunks[c].len() - 1)))
    }

    /// Panics if an invariant of the module doc does not hold.
    #[cfg(test)]
    pub fn check(&self) {
        assert_eq!(self.firsts.len(), self.chunks.len());
        let mut previous: Option<u64> = None;
        let mut total = 0;
        for (chunk, &first) in self.chunks.iter().zip(&self.firsts) {
            assert!((1..=CHUNK_MAX).contains(&chunk.len()), "chunk size");
            assert_eq!(chunk.keys.len(), chunk.vals.len());
            assert_eq!(chunk.keys[0], first, "first key recorded");
            for &k in &chunk.keys {
                assert!(previous.map_or(true, |p| p < k), "keys ascend");
                previous = Some(k);
            }
            total += chunk.len();
        }
        assert_eq!(total, self.len);
        if let Some(spare) = &self.spare {
            assert!(
                spare.keys.is_empty() && spare.vals.is_empty(),
                "the spare is cleared"
            );
        }
    }
}

/// Iterates from a position to the end.
struct Iter<'a, V> {
    map: &'a ChunkMap<V>,
    at: Option<Pos>,
}

impl<V: Copy> Iterator for Iter<'_, V> {
    type Item = (u64, V);

    fn next(&mut self) -> Option<(u64, V)> {
        let (c, i) = self.at?;
        let item = self.map.at((c, i));
        self.at = self.map.normalize((c, i + 1));
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::ops::Bound::{Excluded, Unbounded};

    #[test]
    fn an_empty_map_finds_nothing() {
        let m: ChunkMap<u32> = ChunkMap::default();
        assert_eq!(
            (m.get(0), m.before(5), m.after(5), m.last()),
            (None, None, None, None)
        );
        assert_eq!(m.range_from_before(7).count(), 0);
        m.check();
    }

    #[test]
    fn chunks_split_when_full_and_merge_when_nearly_empty() {
        let mut m = ChunkMap::default();
        for k in 0..10 * CHUNK_MAX as u64 {
            m.insert(k * 10, k);
        }
        m.check();
        assert!(m.chunks.len() >= 10, "split into chunks");
        for k in 0..10 * CHUNK_MAX as u64 {
            if k % 16 != 0 {
                assert_eq!(m.remove(k * 10), Some(k));
            }
        }
        m.check();
        assert!(
            m.chunks.len() <= 2,
            "{} chunks for {}",
            m.chunks.len(),
            m.len()
        );
        assert_eq!(m.before(25), Some((0, 0)));
        assert_eq!(m.after(0), Some((160, 16)));
    }

    #[test]
    fn a_map_emptied_and_filled_again_keeps_its_allocation() {
        let mut m = ChunkMap::default();
        m.insert(0, 1u32);
        m.insert(10, 2);
        let keys = m.chunks[0].keys.as_ptr();
        assert_eq!((m.remove(0), m.remove(10)), (Some(1), Some(2)));
        m.check();
        assert!(m.is_empty());
        assert_eq!(
            m,
            ChunkMap::default(),
            "the spare is no part of the contents"
        );
        m.insert(20, 3);
        m.insert(30, 4);
        m.check();
        assert_eq!(
            m.chunks[0].keys.as_ptr(),
            keys,
            "the emptied chunk's vectors, reused"
        );
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(20, 3), (30, 4)]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Mutate(u64),
        /// Queries between changes, with hints left by the last searches (stale after a change).
        Probe(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u64..2000;
        prop_oneof![
            3 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key.clone().prop_map(Op::Remove),
            1 => key.clone().prop_map(Op::Mutate),
            2 => key.prop_map(Op::Probe),
        ]
    }

    /// `get`, `before`, `after` and the first `range_len` entries of `range_from_before` at `k`
    /// answer as the model does.
    fn queries_agree(
        m: &ChunkMap<u32>,
        model: &BTreeMap<u64, u32>,
        k: u64,
        range_len: usize,
    ) -> Result<(), TestCaseError> {
        let entry = |(&k, &v): (&u64, &u32)| (k, v);
        prop_assert_eq!(m.get(k), model.get(&k).copied());
        prop_assert_eq!(m.before(k), model.range(..k).next_back().map(entry));
        prop_assert_eq!(
            m.after(k),
            model.range((Excluded(k), Unbounded)).next().map(entry)
        );
        let before = model.range(..k).next_back().into_iter();
        let want: Vec<(u64, u32)> = before
            .chain(model.range(k..))
            .map(entry)
            .take(range_len)
            .collect();
        prop_assert_eq!(
            m.range_from_before(k).take(range_len).collect::<Vec<_>>(),
            want
        );
        Ok(())
    }

    proptest! {
        /// Every query answers as a `BTreeMap` does after the same inserts and removes.
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec(op(), 0..1500), probes in proptest::collection::vec(0u64..2100, 20)) {
            let mut m = ChunkMap::default();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(m.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(m.remove(k), model.remove(&k)),
                    Op::Mutate(k) => {
                        if let Some(v) = m.get_mut(k) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&k) {
                            *v = v.wrapping_add(1);
                        }
                    }
                    Op::Probe(k) => queries_agree(&m, &model, k, 3)?,
                }
            }
            m.check();
            prop_assert_eq!(m.len(), model.len());
            let all: Vec<(u64, u32)> = model.iter().map(|(&k, &v)| (k, v)).collect();
            prop_assert_eq!(m.iter().collect::<Vec<_>>(), all);
            prop_assert_eq!(m.last(), model.iter().next_back().map(|(&k, &v)| (k, v)));
            for p in probes {
                queries_agree(&m, &model, p, usize::MAX)?;
            }
        }
    }
}
