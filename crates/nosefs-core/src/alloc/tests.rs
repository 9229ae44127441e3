//! The block allocator's tests: runs from the bitmap, regions, promises, fresh space, backing.

use super::*;

#[test]
fn blocks_past_what_was_ever_handed_out_are_fresh() {
    // Blocks 0-2 and 5 in use at mount, in one region of 16.
    let a = BlockAllocator::from_bitmap(&[0b0010_0111, 0], 16, 1);
    assert!(!a.is_fresh(5) && a.is_fresh(6) && a.is_fresh(15));
    let (start, n) = a.alloc_upto(Some(6), 2).unwrap();
    assert_eq!((start, n), (6, 2));
    assert!(!a.is_fresh(7) && a.is_fresh(8));
    a.free(6, 2);
    assert!(!a.is_fresh(7), "freed space stays used space");
    // First fit takes the lowest free run: space used before, ahead of the fresh end.
    assert_eq!(a.alloc_upto(None, 2), Some((3, 2)));
}

/// A file system with room for the first `room` chunks of the data zone (at byte 4096),
/// holes everywhere; it records the chunks it reserves.
struct FakeFile {
    room: u64,
    reserved: parking_lot::Mutex<Vec<u64>>,
    refuse: Option<i32>,
}

const CHUNK_BYTES: u64 = backing::CHUNK_BLOCKS * crate::format::BLOCK_SIZE;

impl crate::pmem::BackingFile for std::sync::Arc<FakeFile> {
    fn reserve(&self, offset: u64, len: u64) -> std::io::Result<()> {
        if let Some(errno) = self.refuse {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        assert_eq!(
            (offset - 4096) % CHUNK_BYTES,
            0,
            "whole chunks after the data offset"
        );
        assert_eq!(len, CHUNK_BYTES);
        self.reserved.lock().push((offset - 4096) / CHUNK_BYTES);
        Ok(())
    }

    fn free_bytes(&self) -> std::io::Result<u64> {
        Ok((self.room - self.reserved.lock().len() as u64) * CHUNK_BYTES)
    }

    fn hole_bytes(&self, offset: u64, len: u64) -> std::io::Result<u64> {
        if offset < 4096 {
            return Ok(0); // the metadata's pages are all there
        }
        let chunk = (offset - 4096) / CHUNK_BYTES;
        Ok(if self.reserved.lock().contains(&chunk) {
            0
        } else {
            len
        })
    }
}

fn backed_by(
    blocks: u64,
    room: u64,
    refuse: Option<i32>,
) -> (BlockAllocator, std::sync::Arc<FakeFile>) {
    let a = BlockAllocator::from_bitmap(&vec![0u8; blocks.div_ceil(8) as usize], blocks, 1);
    let file = std::sync::Arc::new(FakeFile {
        room,
        reserved: parking_lot::Mutex::new(Vec::new()),
        refuse,
    });
    a.reserve_backing(Backing::new(
        Box::new(std::sync::Arc::clone(&file)),
        4096,
        blocks,
    ));
    (a, file)
}

#[test]
fn blocks_whose_pages_cannot_be_reserved_are_not_handed_out() {
    let chunk = backing::CHUNK_BLOCKS;
    let (a, file) = backed_by(4 * chunk, 2, None);
    let asked = &file.reserved;
    // The first chunk is reserved once, however many allocations use it.
    assert_eq!(a.alloc(10), Some(0));
    assert_eq!(a.alloc_upto(Some(10), chunk - 10), Some((10, chunk - 10)));
    assert_eq!(*asked.lock(), vec![0]);
    // A run across chunks 1 and 2: chunk 2 has no room, so nothing is handed out...
    assert!(!a.alloc_exact(chunk, chunk + 1));
    assert_eq!(a.alloc_upto(Some(2 * chunk), 5), None);
    // ...and nothing is lost: every block not handed out is free and available again.
    assert_eq!(a.free_blocks(), 3 * chunk);
    assert_eq!(a.available_blocks(), 3 * chunk);
    // Chunk 1 alone has room.
    assert_eq!(a.alloc_upto(Some(chunk), chunk), Some((chunk, chunk)));
    // A promise stays whole when its blocks cannot be reserved.
    assert!(a.promise(8));
    let mut promised = 8;
    assert_eq!(
        a.alloc_upto_promised(Some(2 * chunk), 8, &mut promised),
        None
    );
    assert_eq!(promised, 8);
    assert_eq!(a.available_blocks(), 2 * chunk - 8);
    // Freed blocks of reserved chunks are handed out again without asking.
    a.free(0, 10);
    let calls = asked.lock().len();
    assert_eq!(a.alloc(10), Some(0));
    assert_eq!(asked.lock().len(), calls);
}

#[test]
fn a_file_system_without_fallocate_reserves_nothing() {
    let (a, file) = backed_by(512, 100, Some(libc::EOPNOTSUPP));
    assert_eq!(a.alloc(300), Some(0));
    assert_eq!(a.alloc(100), Some(300));
    assert!(file.reserved.lock().is_empty());
}

#[test]
fn promised_blocks_are_left_to_their_holder() {
    let a = BlockAllocator::from_bitmap(&[0u8; 8], 64, 2);
    assert_eq!(a.available_blocks(), 64);
    assert!(a.promise(40));
    assert!(!a.promise(30), "only 24 are not promised");
    // Others get the 24 unpromised blocks, then nothing.
    let mut others = 0;
    while let Some((_, n)) = a.alloc_upto(None, 8) {
        others += n;
    }
    assert_eq!(others, 24);
    assert_eq!(a.alloc(1), None);
    // The holder gets its 40, spending its promise.
    let mut promise = 40;
    let mut mine = 0;
    while let Some((_, n)) = a.alloc_upto_promised(None, 16, &mut promise) {
        mine += n;
    }
    assert_eq!((mine, promise), (40, 0));
    a.free(0, 8);
    assert_eq!(a.available_blocks(), 8, "freed blocks are anyone's");
    assert!(a.promise(8));
    a.release_promise(8);
    assert_eq!(a.available_blocks(), 8);
}

#[test]
fn word_skipping_finds_the_same_runs_as_a_bit_walk() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for case in 0..200 {
        let blocks = 64 * 9 + case % 70;
        let mut bits = vec![0u8; 88];
        for word in 0..11u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let fill = match seed >> 62 {
                0 => 0,
                1 => u64::MAX,
                _ => seed.rotate_left(17),
            };
            bits[word as usize * 8..][..8].copy_from_slice(&fill.to_le_bytes());
        }
        let first = case % 3;
        let mut naive = BTreeMap::new();
        let mut start = None;
        for b in first..blocks {
            match (bitmap::is_set(&bits, b), start) {
                (false, None) => start = Some(b),
                (true, Some(s)) => {
                    naive.insert(s, b - s);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            naive.insert(s, blocks - s);
        }
        assert_eq!(free_runs(&bits, first, blocks), naive, "case {case}");
    }
}

#[test]
fn runs_come_from_the_bitmap_and_merge_on_free() {
    let mut bits = vec![0u8; 2];
    for b in [2, 3, 9] {
        bitmap::set(&mut bits, b, true);
    }
    let a = BlockAllocator::from_bitmap(&bits, 12, 1);
    assert_eq!(a.free_blocks(), 9);
    assert_eq!(
        a.alloc(3),
        Some(4),
        "the shortest run that holds 3, not the 2 at 0"
    );
    assert_eq!(a.alloc(2), Some(0));
    assert_eq!(a.alloc(3), None, "only 7-8 and 10-11 are left");
    a.free(4, 3);
    a.free(2, 2); // allocated in the bitmap, freed by a commit: merges with 4..7 and 7..9
    assert_eq!(a.alloc(7), Some(2));
    assert_eq!(a.free_blocks(), 2);
}

#[test]
fn regions_steal_and_frees_split_at_region_edges() {
    let bits = vec![0u8; 4];
    let a = BlockAllocator::from_bitmap(&bits, 32, 4);
    assert_eq!(a.free_blocks(), 32);
    // Take everything in 8-block runs: every region serves one, whichever CPU asks.
    let mut got: Vec<u64> = (0..4).map(|_| a.alloc(8).expect("a region")).collect();
    got.sort_unstable();
    assert_eq!(got, vec![0, 8, 16, 24]);
    assert_eq!(a.alloc(1), None);
    a.free(4, 20); // spans regions 0, 1 and 2
    assert_eq!(a.free_blocks(), 20);
    assert_eq!(a.alloc(9), None, "no region holds 9 contiguous blocks");
    assert_eq!(a.alloc_upto(Some(10), 4), Some((10, 4)), "the goal is free");
    assert_eq!(a.alloc_upto(Some(10), 4).map(|(_, n)| n), Some(4));
    a.free(10, 4);
    assert_eq!(a.free_blocks(), 16);
}

#[test]
fn alloc_upto_falls_back_to_the_longest_run() {
    let mut bits = vec![0u8; 2];
    for b in [3, 7] {
        bitmap::set(&mut bits, b, true);
    }
    let a = BlockAllocator::from_bitmap(&bits, 10, 1);
    let (start, len) = a.alloc_upto(Some(3), 8).expect("blocks are free");
    assert_eq!(
        len, 3,
        "the goal is taken and no run holds 8: a longest run"
    );
    assert!(start == 0 || start == 4);
    assert_eq!(a.alloc_upto(None, 8).map(|(_, n)| n), Some(3));
    assert_eq!(a.alloc_upto(None, 8).map(|(_, n)| n), Some(2));
    assert_eq!(a.alloc_upto(None, 8), None);
}
