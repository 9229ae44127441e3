//! Daemon mode: shared mappings of noseFS files made over the file's shadow, which the daemon
//! lends (`nosefs_core::file::lent`): the mapping is the daemon's own memfd of the file, so this
//! process's stores, every other client's mapping and every read and write through the daemon
//! see the same bytes at once, with no FUSE round trip. This process tracks its own stores
//! (userfaultfd write-protection) and reports the pages at msync (committed, atomically),
//! fsync and fdatasync (committed with the file's writes) and munmap (kept for the next
//! commit). Where the kernel cannot track stores, shared mappings go through the daemon's FUSE
//! mount instead (`kernel`). Private mappings are copies (`ffi::mmap::map_copy`).
//!
//! One loan per file and access (read-only or writable) serves every mapping of the file in
//! this process: its memfd is one descriptor, the shim's own (high, stepped around by close and
//! close_range), however many mappings a program makes and keeps (fsx never unmaps its reads).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use nosefs_core::error::Errno;
use nosefs_core::file::lent::BorrowedMapping;
use nosefs_core::file::mmap::{MapAt, MapRequest};
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};
use std::os::fd::AsFd;

use crate::fdtable::{self, LockFd};
use crate::{spans, state};

/// A file's loan: its number with the daemon, the shadow's memfd, and how many mappings here
/// use it (the last one's unmap returns it).
struct Loan {
    number: u64,
    memfd: LockFd,
    mappings: usize,
}

/// A loan's key: the file, and whether its description was opened for writing (a writable
/// loan; mprotect may then add PROT_WRITE to a mapping).
type LoanKey = (u64, bool);

/// A mapping with its loan and protection.
struct Borrowed {
    mapping: BorrowedMapping,
    key: LoanKey,
    prot: i32,
}

#[derive(Default)]
struct Borrowings {
    loans: HashMap<LoanKey, Loan>,
    mappings: Vec<Borrowed>,
}

static BORROWED: Mutex<Option<Borrowings>> = Mutex::new(None);
/// Most mappings of one file this process keeps over its shadow; more go through the FUSE
/// mount. A sync scans every mapping over its range, so a program that keeps thousands (fsx
/// never unmaps its reads) would make each sync scan thousands: databases keep a few.
const MAX_MAPPINGS_PER_FILE: usize = 32;
/// How many mappings there are, read without the lock: munmap, msync and fsync of anything
/// else pay one load.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// This process's mappings over shadows, locked; `None` (one load, no lock) when there are
/// none, which is what munmap, msync and fsync of anything else find.
fn borrowings() -> Option<MappedMutexGuard<'static, Borrowings>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    MutexGuard::try_map(BORROWED.lock(), Option::as_mut).ok()
}

fn set_live(all: &Borrowings) {
    LIVE.store(all.mappings.len(), Ordering::Release);
}

/// A shared mapping of noseFS descriptor `fd` over a loan of its shadow; EOPNOTSUPP when this
/// kernel cannot track stores, the daemon lends no shadow of the file, or this process keeps
/// [`MAX_MAPPINGS_PER_FILE`] of it already (the caller maps through the FUSE mount).
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
    let mut guard = BORROWED.lock();
    let all = guard.get_or_insert_with(Borrowings::default);
    if all.mappings.iter().filter(|b| b.key.0 == file.ino).count() >= MAX_MAPPINGS_PER_FILE {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let key = (file.ino, file.writable());
    let loan = match all.loans.entry(key) {
        std::collections::hash_map::Entry::Occupied(loan) => loan.into_mut(),
        std::collections::hash_map::Entry::Vacant(slot) => {
            let (number, memfd) =
                state::with_remote(|r| r.lend_shadow(file.handle, key.1)).ok_or(Errno::EIO)??;
            let Some(memfd) = LockFd::moved_high(memfd) else {
                let _ = state::with_remote(|r| r.take_lent(number, &[], false, true));
                return Err(Errno(libc::EMFILE));
            };
            slot.insert(Loan {
                number,
                memfd,
                mappings: 0,
            })
        }
    };
    let request = MapRequest {
        shared: true,
        prot,
        at,
    };
    let mapping = match BorrowedMapping::map(loan.memfd.as_fd(), offset, len, &request) {
        Ok(m) => m,
        Err(e) => {
            if loan.mappings == 0 {
                let number = loan.number;
                all.loans.remove(&key);
                let _ = state::with_remote(|r| r.take_lent(number, &[], false, true));
            }
            return Err(e.errno());
        }
    };
    loan.mappings += 1;
    let start = mapping.addr();
    all.mappings.push(Borrowed { mapping, key, prot });
    set_live(all);
    Ok(start)
}

/// Reports `b`'s written pages (`range`: within these bytes of the file), for the file's next
/// commit; with `commit`, committed now; with `end`, the loan ends.
fn report(
    b: &Borrowed,
    loan: &Loan,
    range: Option<(u64, u64)>,
    commit: bool,
    end: bool,
) -> Result<(), Errno> {
    // A scan that fails reports the whole mapping: nothing stored is lost.
    let runs = b
        .mapping
        .take_written(loan.memfd.as_fd(), range)
        .unwrap_or_else(|_| {
            vec![(
                b.mapping.offset() / 4096,
                (b.mapping.len() as u64).div_ceil(4096),
            )]
        });
    state::with_remote(|r| r.take_lent(loan.number, &runs, commit, end)).unwrap_or(Err(Errno::EIO))
}

/// munmap: `None` when the range holds no borrowed mapping. A range must cover each mapping it
/// touches whole (EINVAL otherwise, as for the embedded mode's mappings).
pub fn unmap(addr: usize, len: usize) -> Option<Result<(), Errno>> {
    let mut guard = borrowings()?;
    let all = &mut *guard;
    let places = all
        .mappings
        .iter()
        .map(|b| (b.mapping.addr(), b.mapping.len()));
    let covered = match spans::unmapped(places, addr, len)? {
        Ok(covered) => covered,
        Err(e) => return Some(Err(e)),
    };
    let mut result = Ok(());
    let (gone, kept): (Vec<_>, Vec<_>) = all
        .mappings
        .drain(..)
        .zip(covered)
        .partition(|(_, covered)| *covered);
    all.mappings = kept.into_iter().map(|(b, _)| b).collect();
    set_live(all);
    for (b, _) in gone {
        // The stores are kept for the file's next commit; the mapping goes with `b`, and the
        // loan with its last mapping.
        let loan = all.loans.get_mut(&b.key).expect("a mapping's loan");
        loan.mappings -= 1;
        let last = loan.mappings == 0;
        match report(&b, loan, None, false, last) {
            // The file is gone (unlinked, and no one else held it): its stores have nowhere to
            // go, as on the kernel, whose munmap does not fail for it.
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => result = Err(e),
        }
        if last {
            all.loans.remove(&b.key);
        }
    }
    Some(result)
}

/// msync of `len` bytes from `addr`: `None` when `addr` is in no borrowed mapping. The pages
/// stored through this process's mappings of the file (within the range) and the file's
/// writes become durable as one unit.
pub fn sync(addr: usize, len: usize) -> Option<Result<(), Errno>> {
    let mut guard = borrowings()?;
    let all = &mut *guard;
    let found = all
        .mappings
        .iter()
        .find(|b| spans::touches((b.mapping.addr(), b.mapping.len()), addr, 1))?;
    let at = (addr - found.mapping.addr()) as u64;
    let first = found.mapping.offset() + at / 4096 * 4096;
    let end = (found.mapping.offset() + at).saturating_add(len as u64);
    Some(report_file(all, found.key.0, Some((first, end))))
}

/// Reports the pages of file `ino` stored through this process's mappings (those over `range`
/// of the file, `None`: all) and commits the file. Only the mappings over the range are
/// scanned: a program may keep thousands of mappings of one file (fsx never unmaps its reads).
fn report_file(all: &Borrowings, ino: u64, range: Option<(u64, u64)>) -> Result<(), Errno> {
    let (first, end) = range.unwrap_or((0, u64::MAX));
    let of_file: Vec<&Borrowed> = all
        .mappings
        .iter()
        .filter(|b| b.key.0 == ino)
        .filter(|b| {
            let at = b.mapping.offset();
            at < end && first < at + b.mapping.len() as u64
        })
        .collect();
    for (k, b) in of_file.iter().enumerate() {
        let loan = &all.loans[&b.key];
        report(b, loan, range, k + 1 == of_file.len(), false)?;
    }
    Ok(())
}

/// Whether this process maps file `ino` over its shadow.
pub fn maps_file(ino: u64) -> bool {
    borrowings().is_some_and(|all| all.mappings.iter().any(|b| b.key.0 == ino))
}

/// fsync and fdatasync of file `ino`: `true` when this process maps it here and its pages and
/// writes were committed (then the caller's fsync is done).
pub fn sync_file(ino: u64) -> Result<bool, Errno> {
    let Some(guard) = borrowings() else {
        return Ok(false);
    };
    let all = &*guard;
    if !all.mappings.iter().any(|b| b.key.0 == ino) {
        return Ok(false);
    }
    report_file(all, ino, None)?;
    Ok(true)
}

/// syncfs and sync: every mapped file's pages, committed.
pub fn sync_every_file() -> Result<(), Errno> {
    let Some(guard) = borrowings() else {
        return Ok(());
    };
    let all = &*guard;
    let mut inos: Vec<u64> = all.mappings.iter().map(|b| b.key.0).collect();
    inos.sort_unstable();
    inos.dedup();
    inos.into_iter()
        .try_for_each(|ino| report_file(all, ino, None))
}

/// mprotect of `len` bytes from `addr` to `prot`, before the kernel changes it: `None` when
/// the range touches no borrowed mapping. PROT_WRITE on a mapping of a read-only description
/// is EACCES; otherwise the mapping's stores are tracked from now on.
pub fn protect(addr: usize, len: usize, prot: i32) -> Option<Result<(), Errno>> {
    let mut guard = borrowings()?;
    let all = &mut *guard;
    let touched = |m: &BorrowedMapping| spans::touches((m.addr(), m.len()), addr, len);
    if !all.mappings.iter().any(|b| touched(&b.mapping)) {
        return None;
    }
    for b in all.mappings.iter_mut().filter(|b| touched(&b.mapping)) {
        if prot & libc::PROT_WRITE != 0 {
            if !b.key.1 {
                return Some(Err(Errno(libc::EACCES)));
            }
            let loan = &all.loans[&b.key];
            if let Err(e) = b.mapping.make_writable(loan.memfd.as_fd()) {
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
    let mut guard = borrowings()?;
    let all = &mut *guard;
    let at = all
        .mappings
        .iter()
        .position(|b| spans::touches((b.mapping.addr(), b.mapping.len()), addr, old_len))?;
    let b = &all.mappings[at];
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
    let loan = &all.loans[&b.key];
    let fresh = match b.mapping.remap(loan.memfd.as_fd(), new_len, b.prot) {
        Ok(fresh) => fresh,
        Err(e) => return Some(Err(e.errno())),
    };
    // The old mapping's stores are reported before it goes; the loan stays with the new one.
    if let Err(e) = report(b, loan, None, false, false) {
        return Some(Err(e));
    }
    let start = fresh.addr();
    all.mappings[at].mapping = fresh;
    Some(Ok(start))
}

/// In a forked child: the mappings and loans are the parent's; the child forgets the mappings
/// without touching them (its copies stay mapped, and its stores are not reported: tracking is
/// per process) and closes its copies of the loans' descriptors.
pub fn forget_in_child() {
    // No mapping, so no loan (a loan goes with its last mapping): nothing to forget, and no
    // store that would copy this page in the child before its exec.
    if LIVE.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut guard = BORROWED.lock();
    if let Some(all) = guard.take() {
        for b in all.mappings {
            std::mem::forget(b.mapping);
        }
    }
    LIVE.store(0, Ordering::Release);
}
