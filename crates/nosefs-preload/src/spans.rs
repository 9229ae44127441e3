//! What mmap, munmap and mremap ask of noseFS mappings, whichever mode made them (embedded
//! mode's `maps`, daemon mode's `borrowed`): where a mapping goes, which mappings a range
//! touches and whether it covers them whole, and which mremap requests are served.

use nosefs_core::error::Errno;
use nosefs_core::file::mmap::MapAt;

use crate::fdtable::{Kind, OpenFile};
use crate::state;

/// The checks mmap makes of a noseFS description and its arguments: a regular file open for
/// reading, for writing too when a shared mapping may be stored to (`shared_write`), and a
/// non-negative page-aligned offset. The offset as u64.
pub fn check_map(file: &OpenFile, shared_write: bool, offset: i64) -> Result<u64, Errno> {
    if file.kind != Kind::File || !file.readable() || (shared_write && !file.writable()) {
        return Err(Errno(libc::EACCES));
    }
    let offset = u64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    if offset % 4096 != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(offset)
}

/// Where mmap's flags place a mapping: at `addr` with `MAP_FIXED` (replacing what is there) or
/// `MAP_FIXED_NOREPLACE`; `None`: where the kernel chooses.
pub fn placement(addr: usize, flags: i32) -> Option<MapAt> {
    if flags & libc::MAP_FIXED != 0 {
        Some(MapAt {
            addr,
            replace: true,
        })
    } else if flags & libc::MAP_FIXED_NOREPLACE != 0 {
        Some(MapAt {
            addr,
            replace: false,
        })
    } else {
        None
    }
}

/// Whether a mapping at `at`, `len` bytes long, shares a byte with the `n` bytes (at least one)
/// from `addr`: which mappings mprotect and mremap of that range are about.
pub fn touches((at, len): (usize, usize), addr: usize, n: usize) -> bool {
    at < addr.saturating_add(n.max(1)) && addr < at + len
}

/// munmap of `len` bytes from `addr` over mappings at `spans` (address, length): `None` when
/// it touches none of them; EINVAL (said once) when it covers one only in part (SQLite and LMDB
/// unmap what they mapped); else which of them it covers.
pub fn unmapped(
    spans: impl Iterator<Item = (usize, usize)>,
    addr: usize,
    len: usize,
) -> Option<Result<Vec<bool>, Errno>> {
    // munmap(2) rounds the length up to whole pages.
    let end = addr.checked_add(len.checked_next_multiple_of(4096)?)?;
    let touched: Vec<(bool, bool)> = spans
        .map(|(at, n)| {
            let touched = at < end && addr < at + n;
            (touched, touched && (at < addr || at + n > end))
        })
        .collect();
    if !touched.iter().any(|t| t.0) {
        return None;
    }
    if touched.iter().any(|t| t.1) {
        state::say("munmap of part of a mapping of a noseFS file is not supported (EINVAL); unmap it whole");
        return Some(Err(Errno::EINVAL));
    }
    Some(Ok(touched.into_iter().map(|t| t.0).collect()))
}

/// What mremap of `old_len` bytes at `addr` (a mapping at `at`, `len` bytes long) asks:
/// `Ok(None)` to keep it where it is (the size stays), `Ok(Some(()))` to make a new one where
/// the kernel places it (MREMAP_MAYMOVE); EINVAL for part of a mapping or MREMAP_FIXED, ENOMEM
/// to grow or shrink in place (not done).
pub fn remap_asks(
    (at, len): (usize, usize),
    addr: usize,
    old_len: usize,
    new_len: usize,
    flags: i32,
) -> Result<Option<()>, Errno> {
    let whole = at == addr && old_len.checked_next_multiple_of(4096) == Some(len);
    if !whole || flags & libc::MREMAP_FIXED != 0 || new_len == 0 {
        return Err(Errno::EINVAL);
    }
    if new_len.checked_next_multiple_of(4096) == Some(len) {
        return Ok(None);
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        return Err(Errno(libc::ENOMEM));
    }
    Ok(Some(()))
}
