//! Mappings of noseFS files in embedded mode: the core's [`Mapping`]s, kept by address so that
//! `munmap`, `msync` and `mremap` find them. Every mapping of a file in the process shares the
//! file's shadow, and msync, fsync and fdatasync commit the pages stored to, atomically
//! (`nosefs_core::file::mmap`). Daemon mode maps shared through the kernel's FUSE mount (`kernel`)
//! and private mappings as copies (`ffi::mmap::map_copy`).

use std::sync::atomic::{AtomicUsize, Ordering};

use nosefs_core::error::Errno;
use nosefs_core::file::mmap::{MapAt, MapRequest, Mapping};
use parking_lot::Mutex;

use crate::fdtable;
use crate::{spans, state};

/// Each mapping with its protection (mremap makes the new one alike) and whether its
/// description was opened for writing (mprotect may then add PROT_WRITE to a shared one).
static MAPPINGS: Mutex<Vec<(Mapping, i32, bool)>> = Mutex::new(Vec::new());
/// `MAPPINGS.len()`, read without the lock: munmap and msync of memory that is not a noseFS
/// mapping (malloc's, every program's) pay one load.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn errno(e: nosefs_core::error::Error) -> Errno {
    e.errno()
}

/// mmap of noseFS descriptor `fd`.
pub fn map(
    addr: usize,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> Result<usize, Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let map_type = flags & libc::MAP_TYPE;
    let shared = map_type == libc::MAP_SHARED || map_type == libc::MAP_SHARED_VALIDATE;
    let offset = spans::check_map(&file, shared && prot & libc::PROT_WRITE != 0, offset)?;
    let at = spans::placement(addr, flags);
    if let Some(MapAt {
        addr,
        replace: true,
    }) = at
    {
        // MAP_FIXED over our own mapping: retire it first (its stores are kept for the next
        // sync), so that it never unmaps what replaces it.
        unmap(addr, len).transpose()?;
    }
    let request = MapRequest { shared, prot, at };
    let mapping = state::with_fs(|fs| fs.map_with(file.ino, offset, len, &request).map_err(errno))?;
    let start = mapping.addr();
    let mut all = MAPPINGS.lock();
    all.push((mapping, prot, file.writable()));
    LIVE.store(all.len(), Ordering::Release);
    Ok(start)
}

/// munmap: `None` when the range holds no noseFS mapping (the kernel's munmap serves it).
/// A range must cover each noseFS mapping it touches whole (SQLite and LMDB unmap what they
/// mapped); part of one is EINVAL, said once.
pub fn unmap(addr: usize, len: usize) -> Option<Result<(), Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut all = MAPPINGS.lock();
    let covered = match spans::unmapped(all.iter().map(|(m, ..)| (m.addr(), m.len())), addr, len)? {
        Ok(covered) => covered,
        Err(e) => return Some(Err(e)),
    };
    // Dropping a mapping scans its written pages into the file's shadow, then unmaps it.
    let mut covered = covered.into_iter();
    all.retain(|_| !covered.next().unwrap_or(false));
    LIVE.store(all.len(), Ordering::Release);
    Some(Ok(()))
}

/// msync of `len` bytes from `addr`: `None` when `addr` is in no noseFS mapping.
pub fn sync(addr: usize, len: usize) -> Option<Result<(), Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let all = MAPPINGS.lock();
    let (mapping, ..) = all
        .iter()
        .find(|(m, ..)| m.addr() <= addr && addr < m.addr() + m.len())?;
    let at = addr - mapping.addr();
    Some(state::with_fs(|fs| {
        fs.msync_range(mapping, at, len).map_err(errno)
    }))
}

/// mprotect of `len` bytes from `addr` to `prot`, before the kernel changes it: `None` when
/// the range touches no noseFS mapping. Adding PROT_WRITE to a shared mapping whose
/// description is read-only is EACCES, as the kernel answers; otherwise the core starts
/// tracking the mapping's stores first (a read-only shared mapping is not tracked until then).
pub fn protect(addr: usize, len: usize, prot: i32) -> Option<Result<(), Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut all = MAPPINGS.lock();
    let touched = |m: &Mapping| spans::touches((m.addr(), m.len()), addr, len);
    if !all.iter().any(|(m, ..)| touched(m)) {
        return None;
    }
    if prot & libc::PROT_WRITE != 0 {
        for (mapping, _, may_write) in all.iter().filter(|(m, ..)| touched(m)) {
            if mapping.is_shared() && !may_write {
                return Some(Err(Errno(libc::EACCES)));
            }
            if let Err(e) = state::with_fs(|fs| fs.make_writable(mapping).map_err(errno)) {
                return Some(Err(e));
            }
        }
    }
    for entry in all.iter_mut().filter(|(m, ..)| touched(m)) {
        entry.1 = prot;
    }
    Some(Ok(()))
}

/// mremap of `old_len` bytes at `addr`: `None` when the range holds no noseFS mapping (the
/// kernel's mremap serves it). A whole noseFS mapping may grow or shrink where the kernel
/// places the new one (MREMAP_MAYMOVE, as Python's `mmap.resize` and SQLite ask), its stores
/// kept (`Fs::remap`); ENOMEM without MREMAP_MAYMOVE unless the size stays (growing in place is
/// not done), EINVAL for part of a mapping or MREMAP_FIXED.
pub fn remap(
    addr: usize,
    old_len: usize,
    new_len: usize,
    flags: i32,
) -> Option<Result<usize, Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut all = MAPPINGS.lock();
    let at = all
        .iter()
        .position(|(m, ..)| spans::touches((m.addr(), m.len()), addr, old_len))?;
    let (mapping, prot, _) = &all[at];
    match spans::remap_asks(
        (mapping.addr(), mapping.len()),
        addr,
        old_len,
        new_len,
        flags,
    ) {
        Err(e) => return Some(Err(e)),
        Ok(None) => return Some(Ok(addr)),
        Ok(Some(())) => {}
    }
    let fresh = match state::with_fs(|fs| fs.remap(mapping, new_len, *prot).map_err(errno)) {
        Ok(fresh) => fresh,
        Err(e) => return Some(Err(e)),
    };
    let start = fresh.addr();
    // The old mapping goes now: its written pages are kept for the next sync.
    all[at].0 = fresh;
    Some(Ok(start))
}

/// In a forked child: the mappings are the parent's (its write tracking acts on the parent's
/// memory), so the child forgets them without touching them; its copies of the pages stay
/// mapped until it unmaps or execs, and its stores are not synced (per-process tracking).
pub fn forget_in_child() {
    // Nothing to forget (the usual fork): no store, so the child's first write to this page
    // does not copy it before its exec.
    if LIVE.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut all = MAPPINGS.lock();
    for (mapping, ..) in all.drain(..) {
        std::mem::forget(mapping);
    }
    LIVE.store(0, Ordering::Release);
}
