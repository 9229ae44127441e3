//! What the directory journal (`namespace::txn`) and the file journal (`file::journal`) share:
//! the deliberate protocol bugs the crash checker's self-test injects, the apply steps' bitmap
//! updates, and the tail word's entry-count mask. Neither journal imports the other.

use crate::image::Image;

/// Faults the crash checker injects into the commit protocol, to show that it notices them.
/// Compiled in only with the `fault-injection` feature; otherwise no fault is ever active.
pub mod fault {
    /// A deliberate bug in the commit protocol.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Fault {
        /// No fault: the protocol as designed.
        None = 0,
        /// Leave out the fence after the commit store.
        SkipCommitFence = 1,
        /// Leave out the fence after the apply step.
        SkipApplyFence = 2,
        /// Commit without first settling a log that last touched one of the buckets, or last
        /// committed the file (`settle`, rule 1).
        SkipSettle = 3,
        /// Return what a commit freed to the pools at once, not after the logs are settled
        /// (`settle`, rule 2).
        SkipLimbo = 4,
    }

    #[cfg(feature = "fault-injection")]
    static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

    /// Makes `fault` active for every commit in this process until the next call.
    #[cfg(feature = "fault-injection")]
    pub fn inject(fault: Fault) {
        ACTIVE.store(fault as u8, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether `fault` is active.
    #[inline]
    pub fn active(fault: Fault) -> bool {
        #[cfg(feature = "fault-injection")]
        return ACTIVE.load(std::sync::atomic::Ordering::Relaxed) == fault as u8;
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = fault;
            false
        }
    }
}

/// Sets or clears bitmap bits `[start, start + count)` with atomic word updates; flushes them.
pub fn set_bitmap_bits(image: &Image, start: u64, count: u64, on: bool) {
    update_bitmap_bits(image, start, count, on);
    flush_bitmap_bits(image, start, count);
}

/// Sets or clears bitmap bits `[start, start + count)` with atomic word updates, unflushed.
///
/// An atomic read-modify-write waits for every write-back in flight, as a fence does (measured
/// here: a locked add after a `clwb` costs the 160 ns of an `sfence`, one right after a fence
/// 6 ns), so a commit runs its updates right after a fence and flushes them later
/// ([`flush_bitmap_bits`]).
pub fn update_bitmap_bits(image: &Image, start: u64, count: u64, on: bool) {
    for (offset, mask) in bitmap_words(image, start, count) {
        if on {
            image.region().fetch_or_u64(offset, mask);
        } else {
            image.region().fetch_and_u64(offset, !mask);
        }
    }
}

/// Flushes the bitmap words of bits `[start, start + count)`.
pub fn flush_bitmap_bits(image: &Image, start: u64, count: u64) {
    for (offset, _) in bitmap_words(image, start, count) {
        image.region().flush(offset, 8);
    }
}

/// The bitmap words holding bits `[start, start + count)`: each word's offset and the mask of
/// those bits in it.
fn bitmap_words(image: &Image, start: u64, count: u64) -> impl Iterator<Item = (u64, u64)> {
    let base = image
        .geometry()
        .span(crate::format::layout::Zone::Bitmap)
        .offset;
    let end = start + count;
    let mut block = start;
    std::iter::from_fn(move || {
        if block >= end {
            return None;
        }
        let first = block % 64;
        let n = (end - block).min(64 - first);
        let mask = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << first
        };
        let word = (base + (block / 64) * 8, mask);
        block += n;
        Some(word)
    })
}

/// Low 32 bits of a log's tail (directory and file logs alike): the committed entry count.
pub const TAIL_COUNT_MASK: u64 = 0xffff_ffff;
