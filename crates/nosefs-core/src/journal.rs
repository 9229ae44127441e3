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
        /// Commit without first settling a log that last touched one of the buckets
        /// (`namespace::settle`, rule 1).
        SkipSettle = 3,
        /// Return what a directory commit freed to the pools at once, not after the logs are
        /// settled (`namespace::settle`, rule 2).
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
    let base = image
        .geometry()
        .span(crate::format::layout::Zone::Bitmap)
        .offset;
    let mut block = start;
    while block < start + count {
        let first = block % 64;
        let n = (start + count - block).min(64 - first);
        let mask = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << first
        };
        let offset = base + (block / 64) * 8;
        if on {
            image.region().fetch_or_u64(offset, mask);
        } else {
            image.region().fetch_and_u64(offset, !mask);
        }
        image.region().flush(offset, 8);
        block += n;
    }
}

/// Low 32 bits of a log's tail (directory and file logs alike): the committed entry count.
pub const TAIL_COUNT_MASK: u64 = 0xffff_ffff;
