//! The blocks of the data zone that a file's ranges share: which are in use, and how many of
//! their bytes nothing uses (the space a file pins beyond its data). Kept by the file's map for
//! its pieces (`filemap`) and by the file state for its committed extents.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use smallvec::SmallVec;

use crate::format::BLOCK_SIZE;

/// Blocks that ranges of a zone-disjoint set (a file's pieces, or its committed extents) touch
/// *without covering all of the block*, with how many ranges do so.
///
/// Why this is enough to tell whether a block is in use, at O(1) per range instead of O(blocks):
/// a range that covers a whole block is the only range of the set touching it, so a block whose
/// bytes were just dropped by a range can only be covered whole by no one (the dropped bytes
/// are held by nobody now), and it is in use exactly when some range still touches part of it,
/// which is what the count says. [`super::file`] relies on this when it frees blocks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BlockRefs {
    counts: HashMap<u64, u32, BuildHasherDefault<BlockHasher>>,
    /// Bytes the counted ranges hold inside the blocks they share: with the number of those
    /// blocks, how much of them nothing uses ([`BlockRefs::unused_bytes`]), kept as ranges come
    /// and go so that the fragmentation policy reads it for free.
    shared_bytes: u64,
}

impl BlockRefs {
    /// Counts the range `[addr, addr + len)`.
    pub fn add(&mut self, addr: u64, len: u64) {
        for block in partial_blocks(addr, len) {
            *self.counts.entry(block).or_insert(0) += 1;
            self.shared_bytes += bytes_in_block(addr, len, block);
        }
    }

    /// Stops counting the range `[addr, addr + len)`, which was counted.
    pub fn remove(&mut self, addr: u64, len: u64) {
        for block in partial_blocks(addr, len) {
            let count = self
                .counts
                .get_mut(&block)
                .unwrap_or_else(|| panic!("block {block} was not counted"));
            self.shared_bytes -= bytes_in_block(addr, len, block);
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&block);
            }
        }
    }

    /// How many counted ranges touch part of `block`.
    pub fn count(&self, block: u64) -> usize {
        self.counts.get(&block).map_or(0, |&n| n as usize)
    }

    /// Whether some counted range touches part of `block`.
    pub fn touched(&self, block: u64) -> bool {
        self.counts.contains_key(&block)
    }

    /// Bytes of the blocks the ranges touch that no range holds: what they pin beyond their
    /// own bytes (ranges are zone-disjoint, and a block covered whole has nothing unused).
    /// Saturating: ranges read from a damaged image may overlap, and a stat must not panic.
    pub fn unused_bytes(&self) -> u64 {
        (self.counts.len() as u64 * BLOCK_SIZE).saturating_sub(self.shared_bytes)
    }
}

/// Bytes of `[addr, addr + len)` inside `block`.
fn bytes_in_block(addr: u64, len: u64, block: u64) -> u64 {
    let (start, end) = (block * BLOCK_SIZE, (block + 1) * BLOCK_SIZE);
    (addr + len).min(end) - addr.max(start)
}

/// The blocks (at most two: the first and the last) that `[addr, addr + len)` touches without
/// covering whole.
fn partial_blocks(addr: u64, len: u64) -> SmallVec<[u64; 2]> {
    debug_assert!(len > 0);
    let end = addr + len;
    let (first, last) = (addr / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
    let mut blocks = SmallVec::new();
    if addr % BLOCK_SIZE != 0 || end < (first + 1) * BLOCK_SIZE {
        blocks.push(first);
    }
    if last != first && end % BLOCK_SIZE != 0 {
        blocks.push(last);
    }
    blocks
}

/// Hashes block numbers by one multiplication (Fibonacci hashing): they are not chosen by an
/// adversary, and the default SipHash would cost more than the table lookup it feeds.
#[derive(Debug, Default, Clone, Copy)]
pub struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_blocks_are_the_ends_a_range_does_not_cover_whole() {
        let b = BLOCK_SIZE;
        assert!(partial_blocks(0, b).is_empty(), "one whole block");
        assert!(partial_blocks(b, 3 * b).is_empty(), "whole blocks only");
        assert_eq!(partial_blocks(100, 10).as_slice(), &[0], "inside one block");
        assert_eq!(
            partial_blocks(0, 10).as_slice(),
            &[0],
            "the start of a block"
        );
        assert_eq!(
            partial_blocks(b - 10, 10).as_slice(),
            &[0],
            "the end of a block"
        );
        assert_eq!(
            partial_blocks(b - 1, 2).as_slice(),
            &[0, 1],
            "straddling two"
        );
        assert_eq!(partial_blocks(100, 2 * b).as_slice(), &[0, 2]);
        assert_eq!(
            partial_blocks(0, b + 1).as_slice(),
            &[1],
            "whole first, partial last"
        );
        assert_eq!(
            partial_blocks(b - 1, b + 1).as_slice(),
            &[0],
            "partial first, whole last"
        );
    }

    #[test]
    fn block_refs_count_ranges_until_the_last_leaves() {
        let mut refs = BlockRefs::default();
        refs.add(100, 10); // block 0
        refs.add(2000, 3000); // the end of block 0 and the start of block 1
        refs.add(2 * BLOCK_SIZE, BLOCK_SIZE); // block 2 whole: not counted
        assert!(refs.touched(0) && refs.touched(1));
        assert!(!refs.touched(2), "a block covered whole is not shared");
        refs.remove(100, 10);
        assert!(refs.touched(0), "the second range still touches block 0");
        refs.remove(2000, 3000);
        assert!(!refs.touched(0) && !refs.touched(1));
        refs.remove(2 * BLOCK_SIZE, BLOCK_SIZE);
        assert_eq!(refs, BlockRefs::default());
    }

    #[test]
    fn block_refs_know_the_bytes_of_shared_blocks_nothing_uses() {
        let mut refs = BlockRefs::default();
        refs.add(100, 10); // block 0: 10 of 4,096 used
        assert_eq!(refs.unused_bytes(), BLOCK_SIZE - 10);
        refs.add(2000, 3000); // 2,096 more of block 0, 904 of block 1
        assert_eq!(refs.unused_bytes(), 2 * BLOCK_SIZE - 10 - 3000);
        refs.add(2 * BLOCK_SIZE, BLOCK_SIZE); // whole: nothing unused
        refs.add(3 * BLOCK_SIZE + 1, 2 * BLOCK_SIZE); // blocks 3 and 5 shared, 4 whole
        assert_eq!(refs.unused_bytes(), 4 * BLOCK_SIZE - 10 - 3000 - BLOCK_SIZE);
        refs.remove(2000, 3000);
        assert_eq!(refs.unused_bytes(), 3 * BLOCK_SIZE - 10 - BLOCK_SIZE);
        refs.remove(100, 10);
        refs.remove(3 * BLOCK_SIZE + 1, 2 * BLOCK_SIZE);
        assert_eq!(refs.unused_bytes(), 0);
        refs.remove(2 * BLOCK_SIZE, BLOCK_SIZE);
        assert_eq!(refs, BlockRefs::default());
    }

    #[test]
    #[should_panic(expected = "was not counted")]
    fn block_refs_refuse_to_remove_what_they_never_counted() {
        BlockRefs::default().remove(100, 10);
    }
}
