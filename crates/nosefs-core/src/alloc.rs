//! Free data blocks in DRAM: runs of free blocks, first fit, merged with their neighbours on
//! free. Built from the NVM bitmap at mount; the bitmap itself changes only in journal apply
//! steps, so a block handed out here is not allocated on the media until its commit applies.
//!
//! One region for the whole data zone for now; the file-data work splits it into per-CPU
//! regions that steal from each other.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::format::bitmap;

/// Free runs of data blocks.
#[derive(Debug, Default)]
pub struct BlockAllocator {
    /// start block → run length.
    runs: Mutex<BTreeMap<u64, u64>>,
}

impl BlockAllocator {
    /// The free runs of a bitmap over `blocks` data blocks.
    pub fn from_bitmap(bits: &[u8], blocks: u64) -> BlockAllocator {
        let mut runs = BTreeMap::new();
        let mut start = None;
        for block in 0..blocks {
            match (bitmap::is_set(bits, block), start) {
                (false, None) => start = Some(block),
                (true, Some(s)) => {
                    runs.insert(s, block - s);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            runs.insert(s, blocks - s);
        }
        BlockAllocator {
            runs: Mutex::new(runs),
        }
    }

    /// `count` contiguous free blocks (first fit), or `None`.
    pub fn alloc(&self, count: u64) -> Option<u64> {
        assert!(count > 0, "allocating no blocks");
        let mut runs = self.runs.lock();
        let (&start, &len) = runs.iter().find(|(_, &len)| len >= count)?;
        runs.remove(&start);
        if len > count {
            runs.insert(start + count, len - count);
        }
        Some(start)
    }

    /// Returns `count` blocks from `start`, merging with free neighbours.
    pub fn free(&self, start: u64, count: u64) {
        let mut runs = self.runs.lock();
        let (mut start, mut count) = (start, count);
        if let Some((&prev, &len)) = runs.range(..start).next_back() {
            assert!(prev + len <= start, "double free of block {start}");
            if prev + len == start {
                runs.remove(&prev);
                (start, count) = (prev, count + len);
            }
        }
        if let Some(&len) = runs.get(&(start + count)) {
            runs.remove(&(start + count));
            count += len;
        }
        assert!(
            runs.range(start..start + count).next().is_none(),
            "double free in [{start}, +{count})"
        );
        runs.insert(start, count);
    }

    /// Free blocks in all runs.
    pub fn free_blocks(&self) -> u64 {
        self.runs.lock().values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_come_from_the_bitmap_and_merge_on_free() {
        let mut bits = vec![0u8; 2];
        for b in [2, 3, 9] {
            bitmap::set(&mut bits, b, true);
        }
        let a = BlockAllocator::from_bitmap(&bits, 12);
        assert_eq!(a.free_blocks(), 9);
        assert_eq!(a.alloc(3), Some(4), "first fit skips the 2-block run at 0");
        assert_eq!(a.alloc(2), Some(0));
        assert_eq!(a.alloc(3), None, "only 7-8 and 10-11 are left");
        a.free(4, 3);
        a.free(2, 2); // allocated in the bitmap, freed by a commit: merges with 4..7 and 7..9
        assert_eq!(a.alloc(7), Some(2));
        assert_eq!(a.free_blocks(), 2);
    }
}
