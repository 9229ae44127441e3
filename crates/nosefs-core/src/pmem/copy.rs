//! Copying bytes without the copy routine's one slow case on this hardware.
//!
//! glibc's `memcpy` copies a block from about 2 KiB up to its non-temporal threshold with
//! `rep movsb`. On the AMD EPYC this project is measured on, `rep movsb` runs 10-16 times
//! slower when the destination sits 1 to 31 bytes past the source modulo 4 KiB (a cached
//! 3,840-byte copy: 1.3-2.1 us against 0.08-0.16 us at every other distance; 64 KiB: 21.7
//! against 1.35 us; docs/benchmarks.md, "Reads of byte-granular pieces"): the loads ahead alias
//! the stores just made in the low 12 address bits, the classic 4K-aliasing stall, on every
//! line. Byte-granular pieces land at any distance from the reader's buffer.
//! [`copy_nonoverlapping`] copies such a block in chunks below the threshold, which `memcpy`
//! moves with vector loads and stores, and any other block in one call (as a block of 512 KiB or
//! more, which `memcpy` copies without `rep movsb`).

/// Below this, `memcpy` never uses `rep movsb` (its threshold is 2,048 bytes or more), so a
/// chunk of this size is copied at full speed whatever its alignment.
const CHUNK_BYTES: usize = 2048;
/// From this size on, `memcpy` here copies with non-temporal stores instead of `rep movsb`
/// (measured: 500,000 bytes at a slow distance 171 us, 524,288 bytes 23 us, the same as at any
/// other distance), which chunks would only slow down (1 MiB reads -30%). Where glibc's
/// threshold is higher, copies between the two stay as slow as `memcpy` makes them.
const REP_MOVSB_MAX_BYTES: usize = 512 << 10;

/// Whether `rep movsb` would be slow for a copy from `src` to `dst`: the destination 1-31 bytes
/// past the source modulo 4 KiB (measured: 32 and 0 are fast, 1 and 31 slow, wrapping around).
fn slow_distance(dst: usize, src: usize) -> bool {
    (1..32).contains(&(dst.wrapping_sub(src) & 4095))
}

/// Whether a copy of `len` bytes from `src` to `dst` goes in chunks.
fn chunked(dst: usize, src: usize, len: usize) -> bool {
    len > CHUNK_BYTES && len < REP_MOVSB_MAX_BYTES && slow_distance(dst, src)
}

/// `std::ptr::copy_nonoverlapping`, in chunks where one `memcpy` would be slow (see the module
/// documentation). Raw pointers, as the image and the daemon's request areas (memory another
/// process may write) must not be borrowed as slices.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the two ranges must
/// not overlap (as for `std::ptr::copy_nonoverlapping`).
pub unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, len: usize) {
    if !chunked(dst as usize, src as usize, len) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut done = 0;
    while done < len {
        let n = CHUNK_BYTES.min(len - done);
        // SAFETY: `done + n <= len`, so both chunks lie inside the caller's ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), n) };
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_nonoverlapping, slow_distance};

    #[test]
    fn the_slow_distances_are_one_to_thirty_one_past_the_source_modulo_4k() {
        assert!(!slow_distance(1000, 1000));
        assert!(slow_distance(1001, 1000));
        assert!(slow_distance(1031, 1000));
        assert!(!slow_distance(1032, 1000));
        assert!(!slow_distance(1065, 1000), "past the first line: fast");
        assert!(
            slow_distance(1000 + 4096 + 5, 1000),
            "a page further: the same"
        );
        assert!(!slow_distance(999, 1000));
        // Wrapping around the page: 4,090 to 2 is 8 bytes past.
        assert!(slow_distance(8192 + 2, 4090));
        assert!(!slow_distance(4096, 4064));
        // Chunks only where `rep movsb` would run: above one chunk, below its upper bound.
        assert!(!super::chunked(1005, 1000, super::CHUNK_BYTES));
        assert!(super::chunked(1005, 1000, super::CHUNK_BYTES + 1));
        assert!(!super::chunked(1005, 1000, super::REP_MOVSB_MAX_BYTES));
        assert!(!super::chunked(1000, 1000, 100_000));
    }

    #[test]
    fn every_length_and_distance_copies_exactly() {
        let src: Vec<u8> = (0..600_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [
            0,
            1,
            63,
            2047,
            2048,
            2049,
            4096,
            5000,
            12_345,
            super::REP_MOVSB_MAX_BYTES + 7,
        ] {
            for shift in [0, 1, 5, 31, 32, 33, 63] {
                for src_at in [0, 3] {
                    let mut dst = vec![0xeeu8; len + 200];
                    // SAFETY: both ranges are inside their own vectors.
                    unsafe {
                        copy_nonoverlapping(
                            src.as_ptr().add(src_at),
                            dst.as_mut_ptr().add(shift),
                            len,
                        )
                    };
                    assert_eq!(&dst[shift..shift + len], &src[src_at..src_at + len]);
                    assert!(dst[..shift].iter().all(|&b| b == 0xee), "nothing before");
                    assert!(
                        dst[shift + len..].iter().all(|&b| b == 0xee),
                        "nothing after"
                    );
                }
            }
        }
    }
}
