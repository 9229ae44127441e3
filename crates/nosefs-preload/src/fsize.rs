//! RLIMIT_FSIZE, the largest file this process may make, which the kernel enforces in its write,
//! truncate and fallocate paths before any file system sees the call (`generic_write_checks`,
//! `inode_newsize_ok`): a write starting at or past the limit is EFBIG with SIGXFSZ, one crossing
//! it is cut short there, and a size change past it is EFBIG with SIGXFSZ. The shim's noseFS
//! calls do the same (the daemon cannot know a client's limits; stress-ng's `fsize` found them
//! missing).
//!
//! The limit is read once and kept; the shim's `setrlimit` and `prlimit` hooks forget it, so a
//! program that changes its own limit is seen at once (a change made by another process with
//! `prlimit` is not, until this one sets a limit itself).

use std::sync::atomic::{AtomicU64, Ordering};

use nosefs_core::Errno;

/// [`LIMIT`] before it was read.
const UNKNOWN: u64 = u64::MAX - 1;

/// The soft limit in bytes; `u64::MAX` for none (RLIM_INFINITY).
static LIMIT: AtomicU64 = AtomicU64::new(UNKNOWN);

/// The limit, or `None` when there is none.
fn limit() -> Option<u64> {
    let mut known = LIMIT.load(Ordering::Relaxed);
    if known == UNKNOWN {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Fsize).current;
        known = soft.map_or(u64::MAX, |l| l.min(UNKNOWN - 1));
        LIMIT.store(known, Ordering::Relaxed);
    }
    (known != u64::MAX).then_some(known)
}

/// Forgets the limit (after this process set one).
pub fn forget() {
    LIMIT.store(UNKNOWN, Ordering::Relaxed);
}

/// Whether the process has a limit at all (writes then ask for the position they start at).
pub fn limited() -> bool {
    limit().is_some()
}

/// How many of `len` bytes a write starting at `pos` may write: all below the limit, those up
/// to it when it crosses it; EFBIG, with SIGXFSZ, when it starts at or past it.
pub fn writable_bytes(pos: u64, len: usize) -> Result<usize, Errno> {
    cut(limit(), pos, len).ok_or_else(exceeded)
}

/// A size change from `old` to `new`: growing past the limit is EFBIG, with SIGXFSZ. `old` is
/// asked for only when `new` is past the limit.
pub fn may_grow(new: u64, old: impl FnOnce() -> Result<u64, Errno>) -> Result<(), Errno> {
    match limit() {
        Some(limit) if new > limit && new > old()? => Err(exceeded()),
        _ => Ok(()),
    }
}

/// [`writable_bytes`] under `limit`; `None` when refused. An empty write is never refused (the
/// kernel returns before its checks).
fn cut(limit: Option<u64>, pos: u64, len: usize) -> Option<usize> {
    match limit {
        Some(limit) if len > 0 && pos >= limit => None,
        Some(limit) => {
            Some(len.min(usize::try_from(limit.saturating_sub(pos)).unwrap_or(usize::MAX)))
        }
        None => Some(len),
    }
}

/// SIGXFSZ to the calling thread, as the kernel sends it, and the error that goes with it.
fn exceeded() -> Errno {
    crate::sys::raise(libc::SIGXFSZ);
    Errno::EFBIG
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write crossing the limit is cut there, one starting at or past it refused, an empty
    /// one never; no limit cuts nothing.
    #[test]
    fn writes_are_cut_at_the_limit_and_refused_past_it() {
        assert_eq!(cut(Some(4096), 0, 100), Some(100));
        assert_eq!(cut(Some(4096), 4000, 200), Some(96));
        assert_eq!(cut(Some(4096), 4096, 1), None);
        assert_eq!(cut(Some(4096), 5000, 0), Some(0));
        assert_eq!(cut(Some(0), 0, 1), None);
        assert_eq!(cut(None, u64::MAX / 2, 7), Some(7));
    }
}
