//! The block bitmap: one bit per data block, set when the block is allocated.
//!
//! Bit `b` is bit `b % 8` (least significant first) of byte `b / 8`. The zone is
//! `bitmap_bytes` long (at least `ceil(data_block_count / 8)`); bits past `data_block_count` are 0.
//! It changes only in a commit's apply step, so between commits it equals the set of blocks
//! covered by valid extents.

/// Whether block `block` is set in `bitmap`.
pub fn is_set(bitmap: &[u8], block: u64) -> bool {
    bitmap[(block / 8) as usize] & (1 << (block % 8)) != 0
}

/// Sets or clears block `block` in `bitmap`.
pub fn set(bitmap: &mut [u8], block: u64, allocated: bool) {
    let byte = &mut bitmap[(block / 8) as usize];
    let bit = 1u8 << (block % 8);
    if allocated {
        *byte |= bit;
    } else {
        *byte &= !bit;
    }
}

/// Number of set bits among the first `blocks` bits.
pub fn count_set(bitmap: &[u8], blocks: u64) -> u64 {
    let full = (blocks / 8) as usize;
    let mut n: u64 = bitmap[..full]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    for block in (full as u64 * 8)..blocks {
        n += u64::from(is_set(bitmap, block));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_clear_count() {
        let mut bm = vec![0u8; 4];
        for b in [0, 7, 8, 20, 31] {
            set(&mut bm, b, true);
        }
        assert!(is_set(&bm, 7) && is_set(&bm, 8) && !is_set(&bm, 9));
        assert_eq!(bm[0], 0b1000_0001, "bit order is least significant first");
        assert_eq!(count_set(&bm, 32), 5);
        assert_eq!(count_set(&bm, 21), 4);
        set(&mut bm, 7, false);
        assert_eq!(count_set(&bm, 32), 4);
    }
}
