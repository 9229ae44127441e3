//! Daemon mode: shared mappings of noseFS files made over the file's shadow, which the daemon
//! lends (`nosefs_core::file::lent`): the mapping is the daemon's own memfd of the file, so this
//! process's stores, every other client's mapping and every read and write through the daemon
//! see the same bytes at once, with no FUSE round trip. This process tracks its own stores
//! (userfaultfd write-protection) and reports the pages at msync (committed, atomically),
//! fsync and fdatasync (committed with the file's writes) and munmap (kept for the next
//! commit). Where the kernel cannot track stores, shared mappings go through the daemon's FUSE
//! mount instead (`kernel`). Private mappings are copies (`ffi::mmap::map_copy`).

use std::sync::atomic::{AtomicUsize, Ordering};

use nosefs_core::error::Errno;
use nosefs_core::file::lent::BorrowedMapping;
use nosefs_core::file::mmap::{MapAt, MapRequest};
use parking_lot::Mutex;

use crate::fdtable;
use crate::{spans, state};

/// A mapping with its loan, its file and protection, and whether its description was opened
/// for writing (mprotect may then add PROT_WRITE).
struct Borrowed {
    mapping: BorrowedMapping,
    loan: u64,
    ino: u64,
    prot: i32,
    may_write: bool,
}

static BORROWED: Mutex<Vec<Borrowed>> = Mutex::new(Vec::new());
/// `BORROWED.len()`, read without the lock: munmap, msync and fsync of anything else pay one
/// load.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn set_live(all: &[Borrowed]) {
    LIVE.store(all.len(), Ordering::Release);
}

/// A shared mapping of noseFS descriptor `fd` over a loan of its shadow; EOPNOTSUPP when this
/// kernel cannot track stores (the caller maps through the FUSE mount).
pub fn map(
    addr: usize,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> Result<usize, Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let offset = spans::check_map(&file, prot & libc::PROT_WRITE != 0, offset)?;
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    let at = spans::placement(addr, flags);
    if let Some(MapAt {
        addr,
        replace: true,
    }) = at
    {
        // MAP_FIXED over our own mapping: retire it first (its stores reported).
        unmap(addr, len).transpose()?;
    }
    // The loan is writable when the description is: mprotect may add PROT_WRITE later.
    let (loan, memfd) =
        state::with_remote(|r| r.lend_shadow(file.handle, file.writable())).ok_or(Errno::EIO)??;
    let request = MapRequest {
        shared: true,
        prot,
        at,
    };
    let mapping = match BorrowedMapping::map(memfd, offset, len, &request) {
        Ok(m) => m,
        Err(e) => {
            let _ = state::with_remote(|r| r.take_lent(loan, &[], false, true));
            return Err(e.errno());
        }
    };
    let start = mapping.addr();
    let mut all = BORROWED.lock();
    all.push(Borrowed {
        mapping,
        loan,
        ino: file.ino,
        prot,
        may_write: file.writable(),
    });
    set_live(&all);
    Ok(start)
}

/// Reports `b`'s written pages (`range`: within these bytes of the file), for the file's next
/// commit; with `commit`, committed now; with `end`, the loan ends.
fn report(b: &Borrowed, range: Option<(u64, u64)>, commit: bool, end: bool) -> Result<(), Errno> {
    // A scan that fails reports the whole mapping: nothing stored is lost.
    let runs = b.mapping.take_written(range).unwrap_or_else(|_| {
        vec![(
            b.mapping.offset() / 4096,
            (b.mapping.len() as u64).div_ceil(4096),
        )]
    });
    state::with_remote(|r| r.take_lent(b.loan, &runs, commit, end)).unwrap_or(Err(Errno::EIO))
}

/// munmap: `None` when the range holds no borrowed mapping. A range must cover each mapping it
/// touches whole (EINVAL otherwise, as for the embedded mode's mappings).
pub fn unmap(addr: usize, len: usize) -> Option<Result<(), Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut all = BORROWED.lock();
    let places = all.iter().map(|b| (b.mapping.addr(), b.mapping.len()));
    let covered = match spans::unmapped(places, addr, len)? {
        Ok(covered) => covered,
        Err(e) => return Some(Err(e)),
    };
    let mut result = Ok(());
    let (gone, kept): (Vec<_>, Vec<_>) = all
        .drain(..)
        .zip(covered)
        .partition(|(_, covered)| *covered);
    let gone = gone.into_iter().map(|(b, _)| b);
    let kept = kept.into_iter().map(|(b, _)| b).collect();
    *all = kept;
    set_live(&all);
    drop(all);
    for b in gone {
        // The stores are kept for the file's next commit; the mapping goes with `b`.
        if let Err(e) = report(&b, None, false, true) {
            result = Err(e);
        }
    }
    Some(result)
}

/// msync of `len` bytes from `addr`: `None` when `addr` is in no borrowed mapping. The pages
/// stored through this process's mappings of the file (within the range) and the file's
/// writes become durable as one unit.
pub fn sync(addr: usize, len: usize) -> Option<Result<(), Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let all = BORROWED.lock();
    let found = all
        .iter()
        .find(|b| b.mapping.addr() <= addr && addr < b.mapping.addr() + b.mapping.len())?;
    let at = (addr - found.mapping.addr()) as u64;
    let first = found.mapping.offset() + at / 4096 * 4096;
    let end = (found.mapping.offset() + at).saturating_add(len as u64);
    Some(report_file(&all, found.ino, Some((first, end))))
}

/// Reports the pages of every mapping of file `ino` in this process and commits the file.
fn report_file(all: &[Borrowed], ino: u64, range: Option<(u64, u64)>) -> Result<(), Errno> {
    let of_file: Vec<&Borrowed> = all.iter().filter(|b| b.ino == ino).collect();
    for (k, b) in of_file.iter().enumerate() {
        report(b, range, k + 1 == of_file.len(), false)?;
    }
    Ok(())
}

/// fsync and fdatasync of file `ino`: `true` when this process maps it here and its pages and
/// writes were committed (then the caller's fsync is done).
pub fn sync_file(ino: u64) -> Result<bool, Errno> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return Ok(false);
    }
    let all = BORROWED.lock();
    if !all.iter().any(|b| b.ino == ino) {
        return Ok(false);
    }
    report_file(&all, ino, None)?;
    Ok(true)
}

/// syncfs and sync: every mapped file's pages, committed.
pub fn sync_every_file() -> Result<(), Errno> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let all = BORROWED.lock();
    let mut inos: Vec<u64> = all.iter().map(|b| b.ino).collect();
    inos.sort_unstable();
    inos.dedup();
    inos.into_iter()
        .try_for_each(|ino| report_file(&all, ino, None))
}

/// mprotect of `len` bytes from `addr` to `prot`, before the kernel changes it: `None` when
/// the range touches no borrowed mapping. PROT_WRITE on a mapping of a read-only description
/// is EACCES; otherwise the mapping's stores are tracked from now on.
pub fn protect(addr: usize, len: usize, prot: i32) -> Option<Result<(), Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut all = BORROWED.lock();
    let touched = |m: &BorrowedMapping| spans::touches((m.addr(), m.len()), addr, len);
    if !all.iter().any(|b| touched(&b.mapping)) {
        return None;
    }
    for b in all.iter_mut().filter(|b| touched(&b.mapping)) {
        if prot & libc::PROT_WRITE != 0 {
            if !b.may_write {
                return Some(Err(Errno(libc::EACCES)));
            }
            if let Err(e) = b.mapping.make_writable() {
                return Some(Err(e.errno()));
            }
        }
        b.prot = prot;
    }
    Some(Ok(()))
}

/// mremap of `old_len` bytes at `addr`: `None` when the range holds no borrowed mapping. A
/// whole mapping may grow or shrink where the kernel places the new one (MREMAP_MAYMOVE), its
/// stores reported first; ENOMEM without MREMAP_MAYMOVE unless the size stays, EINVAL for part
/// of a mapping or MREMAP_FIXED (as the embedded mode's mappings).
pub fn remap(
    addr: usize,
    old_len: usize,
    new_len: usize,
    flags: i32,
) -> Option<Result<usize, Errno>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut all = BORROWED.lock();
    let at = all
        .iter()
        .position(|b| spans::touches((b.mapping.addr(), b.mapping.len()), addr, old_len))?;
    let b = &all[at];
    match spans::remap_asks(
        (b.mapping.addr(), b.mapping.len()),
        addr,
        old_len,
        new_len,
        flags,
    ) {
        Err(e) => return Some(Err(e)),
        Ok(None) => return Some(Ok(addr)),
        Ok(Some(())) => {}
    }
    let fresh = match b.mapping.remap(new_len, b.prot) {
        Ok(fresh) => fresh,
        Err(e) => return Some(Err(e.errno())),
    };
    // The old mapping's stores are reported before it goes; the loan stays with the new one.
    if let Err(e) = report(b, None, false, false) {
        return Some(Err(e));
    }
    let start = fresh.addr();
    all[at].mapping = fresh;
    Some(Ok(start))
}

/// In a forked child: the mappings and loans are the parent's; the child forgets them without
/// touching them (its copies stay mapped, and its stores are not reported: tracking is per
/// process).
pub fn forget_in_child() {
    let mut all = BORROWED.lock();
    for b in all.drain(..) {
        std::mem::forget(b.mapping);
    }
    LIVE.store(0, Ordering::Release);
}
