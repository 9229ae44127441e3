//! Daemon mode: this process's kernel descriptors of noseFS files, opened on the daemon's FUSE
//! mount, on which the kernel arbitrates POSIX record locks between processes and maps files
//! shared.
//!
//! One descriptor per file per process. POSIX record locks belong to the process and the file,
//! and closing *any* descriptor of the file drops all of them; a kernel descriptor per open
//! description would have dropped the locks taken through the first when the second was made
//! (the kernel opens at the lowest free number, the shim moves it high and closes the low one).
//! The one descriptor is made (or remade, below) only while the process holds no record lock on
//! the file through the shim. It is opened read-write when the file's permissions allow, so any
//! description may lock or map through it; the shim checks the description's own access mode
//! first, as the kernel would (`ops::record_lock_file`, `maps::mappable`).
//!
//! POSIX's rule that closing any descriptor of a file drops the process's locks on it is kept by
//! unlocking the whole file here when a program closes a noseFS descriptor ([`closed`]); the
//! kernel descriptor itself is closed once no description of the file is open in the process and
//! nothing maps it.
//!
//! Shared mappings (`ffi::mmap::map_copy`) map this descriptor: every process mapping the file
//! (clients and programs the shim does not serve) shares the kernel's page cache, the kernel
//! writes dirty pages back as FUSE writes (pending in the daemon, not durable), and msync reaches
//! the daemon as a FUSE fsync, which commits them as one unit. This process's own read, write,
//! truncate and fsync of a file it maps first write the dirty pages back (without committing), so
//! they see the stores and are not overwritten by them later; after a size change through the
//! daemon the kernel is asked the size again.
//!
//! A descriptor is opened by the path its description was opened by, or, when that names
//! another file now (a rename), by a path the daemon finds for the inode ([`path_now`]).
//!
//! flock and OFD locks belong to the open file description, so they are taken on a kernel
//! descriptor of the description's own (`OpenFile::lock_fd`); making one while the process holds
//! record locks on the file would drop those, so it is refused then (ENOLCK, said on stderr).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use nosefs_core::error::Errno;
use parking_lot::Mutex;
use rustix::fs::{Mode, OFlags};

use crate::fdtable::{self, Kind, OpenFile};
use crate::state;

/// A noseFS file opened through the kernel.
#[derive(Debug)]
pub struct KernelFile {
    /// The noseFS inode (the kernel's number for it on the FUSE mount).
    pub ino: u64,
    fd: fdtable::LockFd,
    readable: bool,
    writable: bool,
    /// Whether the process may hold record locks on the file through it: set when a lock is
    /// granted, cleared when a close unlocks the whole file.
    locked: AtomicBool,
    /// Address ranges mapped shared through it.
    ranges: Mutex<Vec<(usize, usize)>>,
    /// Whether it was ever mapped (its pages may be dirty in the kernel even after munmap).
    mapped: AtomicBool,
    /// Whether it was ever mapped writable (mmap with PROT_WRITE, or mprotect to it): only
    /// then can this process have left dirty pages in the kernel to write back. LMDB maps its
    /// file read-only and writes with pwrite: each of its writes and syncs skips the write-back.
    written: AtomicBool,
}

impl KernelFile {
    /// The descriptor number (valid while this is alive).
    pub fn raw(&self) -> i32 {
        self.fd.raw()
    }

    /// Records that a record lock was granted through it.
    pub fn note_locked(&self) {
        self.locked.store(true, Ordering::Relaxed);
    }
}

static FILES: Mutex<Vec<Arc<KernelFile>>> = Mutex::new(Vec::new());
/// `FILES.len()`, read without the lock: close of a descriptor whose file has no kernel
/// descriptor (every close in embedded mode) pays one load.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// How many of them were ever mapped: reads and writes of files that are not (all of them, in a
/// process that maps nothing) pay one load.
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The kernel descriptor of `file`'s file, opened with at least the access asked for.
pub fn for_file(file: &OpenFile, read: bool, write: bool) -> Result<Arc<KernelFile>, Errno> {
    if file.kind != Kind::File && file.kind != Kind::Dir {
        return Err(Errno::EBADF);
    }
    let mut all = FILES.lock();
    let at = all.iter().position(|k| k.ino == file.ino);
    if let Some(i) = at {
        let k = &all[i];
        if (k.readable || !read) && (k.writable || !write) {
            return Ok(Arc::clone(k));
        }
        if k.locked.load(Ordering::Relaxed) {
            state::say("a noseFS file this process holds record locks on was opened through the kernel without the access now asked for; reopening it would drop the locks (ENOLCK)");
            return Err(Errno(libc::ENOLCK));
        }
    }
    let (read, write) = match at {
        Some(i) => (read || all[i].readable, write || all[i].writable),
        None => (read, write),
    };
    let fresh = Arc::new(open(file, read, write)?);
    match at {
        Some(i) => {
            let old = std::mem::replace(&mut all[i], Arc::clone(&fresh));
            // The mappings made through the old descriptor map the same file: the new one
            // writes their pages back as well.
            *fresh.ranges.lock() = std::mem::take(&mut *old.ranges.lock());
            fresh
                .mapped
                .store(old.mapped.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        None => {
            all.push(Arc::clone(&fresh));
            LIVE.store(all.len(), Ordering::Release);
        }
    }
    Ok(fresh)
}

/// Opens `file` through the kernel: read-write when permitted, else with the access asked for;
/// moved high and marked as the shim's own. The process must hold no record lock on it (the
/// low descriptor's close would drop them).
fn open(file: &OpenFile, read: bool, write: bool) -> Result<KernelFile, Errno> {
    let flags = OFlags::CLOEXEC | OFlags::NOCTTY;
    let path = path_now(file)?;
    let path = path.as_slice();
    let wide = if file.kind == Kind::Dir {
        Err(rustix::io::Errno::ISDIR)
    } else {
        rustix::fs::open(path, flags | OFlags::RDWR, Mode::empty())
    };
    let (opened, readable, writable) = match wide {
        Ok(fd) => (fd, true, true),
        Err(_) => {
            let access = match (read, write) {
                (true, true) => OFlags::RDWR,
                (false, true) => OFlags::WRONLY,
                _ => OFlags::RDONLY,
            };
            let fd = rustix::fs::open(path, flags | access, Mode::empty())
                .map_err(|e| Errno(e.raw_os_error()))?;
            (fd, access != OFlags::WRONLY, access != OFlags::RDONLY)
        }
    };
    same_file(&opened, file)?;
    Ok(KernelFile {
        ino: file.ino,
        fd: fdtable::LockFd::moved_high(opened).ok_or(Errno(libc::EMFILE))?,
        readable,
        writable,
        locked: AtomicBool::new(false),
        ranges: Mutex::new(Vec::new()),
        mapped: AtomicBool::new(false),
        written: AtomicBool::new(false),
    })
}

/// The path through the FUSE mount that names description `file`'s file now: the one it was
/// opened by, or, after a rename, one the daemon finds for its inode (`Fs::path_of`). Looked at
/// with `stat`, not opened: opening another file the process holds record locks on and closing
/// it again would drop them. ENODEV when no name leads to it (it was unlinked).
pub fn path_now(file: &OpenFile) -> Result<Vec<u8>, Errno> {
    let names_it = |path: &[u8]| rustix::fs::stat(path).is_ok_and(|st| st.st_ino == file.ino);
    if names_it(&file.path) {
        return Ok(file.path.clone());
    }
    let prefix = state::config()
        .map(|c| c.prefix.to_vec())
        .unwrap_or_default();
    let inside =
        state::with_service(|s| s.path_of(file.handle)).map_err(|_| Errno(libc::ENODEV))?;
    let path = if inside == b"/" {
        prefix
    } else {
        [prefix.as_slice(), &inside].concat()
    };
    if names_it(&path) {
        Ok(path)
    } else {
        Err(Errno(libc::ENODEV))
    }
}

/// ENODEV unless `opened` is description `file`'s file (a rename between the look and the
/// open).
pub fn same_file(opened: &std::os::fd::OwnedFd, file: &OpenFile) -> Result<(), Errno> {
    if rustix::fs::fstat(opened).map(|st| st.st_ino) == Ok(file.ino) {
        return Ok(());
    }
    state::say("a noseFS file renamed while it was being opened through the FUSE mount cannot be locked or mapped shared this time (ENODEV)");
    Err(Errno(libc::ENODEV))
}

/// The kernel descriptor of file `ino`, if the process has one.
pub fn of(ino: u64) -> Option<Arc<KernelFile>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    FILES.lock().iter().find(|k| k.ino == ino).cloned()
}

/// Whether the process holds record locks on file `ino` through the shim (then no other
/// descriptor of it may be opened and closed).
pub fn locked(ino: u64) -> bool {
    of(ino).is_some_and(|k| k.locked.load(Ordering::Relaxed))
}

/// The kernel descriptor of file `ino` if the process maps (or mapped) it shared.
pub fn mapped_file(ino: u64) -> Option<Arc<KernelFile>> {
    if MAPPED.load(Ordering::Acquire) == 0 {
        return None;
    }
    of(ino).filter(|k| k.mapped.load(Ordering::Relaxed))
}

/// Records that `addr..addr+len` maps `file` shared (`writable`: with PROT_WRITE).
pub fn mapped(file: &KernelFile, addr: usize, len: usize, writable: bool) {
    if writable {
        file.written.store(true, Ordering::Relaxed);
    }
    file.ranges.lock().push((addr, len.next_multiple_of(4096)));
    if !file.mapped.swap(true, Ordering::Relaxed) {
        MAPPED.fetch_add(1, Ordering::Release);
    }
}

/// mprotect adding PROT_WRITE to `addr..addr+len`: a shared mapping of a file there may be
/// stored to from now on.
pub fn made_writable(addr: usize, len: usize) {
    if MAPPED.load(Ordering::Acquire) == 0 {
        return;
    }
    let end = addr.saturating_add(len);
    for k in FILES.lock().iter() {
        if k.ranges
            .lock()
            .iter()
            .any(|&(a, l)| a < end && addr < a + l)
        {
            k.written.store(true, Ordering::Relaxed);
        }
    }
}

/// munmap (which the kernel serves too): forgets the ranges it covers.
pub fn unmapped(addr: usize, len: usize) {
    if MAPPED.load(Ordering::Acquire) == 0 {
        return;
    }
    let end = addr.saturating_add(len.next_multiple_of(4096));
    let mut emptied = false;
    for k in FILES.lock().iter() {
        let mut ranges = k.ranges.lock();
        let before = ranges.len();
        ranges.retain(|&(a, l)| !(addr <= a && a + l <= end));
        emptied |= before > 0 && ranges.is_empty();
    }
    if emptied {
        // Only then the open descriptions are listed (munmap of malloc's memory lands here too).
        forget_unused();
    }
}

/// A program closed a noseFS descriptor of file `ino` (its table entry is gone): the process's
/// record locks on the file are dropped, as closing any descriptor of a file drops them; the
/// kernel descriptor goes when nothing else needs it.
pub fn closed(ino: u64) {
    let Some(k) = of(ino) else {
        return;
    };
    if k.locked.swap(false, Ordering::Relaxed) {
        if k.written.load(Ordering::Relaxed) {
            // As the kernel's close flushes before it drops the locks: the pages this process
            // stored to reach the daemon first. Otherwise the next holder (SQLite's -shm: the
            // process that finds itself alone) truncates through the daemon, and these pages
            // land after, over what it writes (measured: SIGBUS in the next holder's mapping).
            crate::sys::write_back_fd(k.raw(), false);
        }
        let _ = rustix::fs::fcntl_lock(&k.fd, rustix::fs::FlockOperation::NonBlockingUnlock);
    }
    forget_unused();
}

/// Makes the kernel learn the file's size from the daemon (which invalidated the kernel's
/// attributes when the size changed), before a mapping faults against it.
///
/// FUSE drops a getattr reply that raced with another change of the inode's attributes and
/// leaves them invalid (measured: one fstat before mmap left SQLite's -shm at its old size in
/// about one process in seventy of two concurrent writers, SIGBUS); so the kernel is asked
/// until its cached size (statx, no request) is the one its answer gave.
pub fn refresh_size(k: &KernelFile) {
    for _ in 0..8 {
        let answered = rustix::fs::fstat(&k.fd).map(|st| st.st_size as u64);
        if answered.is_err() || answered.ok() == cached_size(k) {
            return;
        }
    }
}

/// Closes the kernel descriptors of files that no open description refers to and nothing maps.
fn forget_unused() {
    let open: Vec<u64> = fdtable::all().iter().map(|(_, f)| f.ino).collect();
    let mut all = FILES.lock();
    all.retain(|k| {
        let keep = !k.ranges.lock().is_empty() || open.contains(&k.ino);
        if !keep && k.mapped.load(Ordering::Relaxed) {
            MAPPED.fetch_sub(1, Ordering::Release);
        }
        keep
    });
    LIVE.store(all.len(), Ordering::Release);
}

/// Daemon mode, before this process reads, writes, truncates or syncs file `ino` through the
/// daemon: the dirty pages of its mappings through the kernel are written back (FUSE writes,
/// pending in the daemon, not committed), so the call sees them and they cannot land later over
/// what it writes. `sync`: fsync instead (the kernel writes back, then the daemon commits).
pub fn write_back_mapped(ino: u64, sync: bool) {
    if let Some(file) = mapped_file(ino).filter(|k| k.written.load(Ordering::Relaxed)) {
        crate::sys::write_back_fd(file.raw(), sync);
    }
}

/// Daemon mode, after this process changed the size of file `ino` through the daemon: the
/// kernel's idea of it (which its mappings fault against) is refreshed.
pub fn refresh_mapped_size(ino: u64) {
    if let Some(file) = mapped_file(ino) {
        refresh_size(&file);
    }
}

/// Daemon mode, after this process wrote file `ino` up to byte `end` through the daemon: as
/// [`refresh_mapped_size`], but only when the kernel's cached size (statx, no request) is
/// below `end`. A write that ends inside what the kernel knows cannot have made pages of a
/// mapping fault (a write never shrinks a file), and the refresh is a FUSE getattr round trip:
/// LMDB's default mode rewrites pages of its mapped file with pwrite, five per transaction.
pub fn refresh_mapped_size_to(ino: u64, end: u64) {
    if let Some(file) = mapped_file(ino) {
        if cached_size(&file).is_some_and(|size| size >= end) {
            return;
        }
        refresh_size(&file);
    }
}

/// The size the kernel holds for the file, without asking the daemon.
fn cached_size(k: &KernelFile) -> Option<u64> {
    use rustix::fs::{AtFlags, StatxFlags};
    rustix::fs::statx(
        &k.fd,
        c"",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::SIZE,
    )
    .ok()
    .map(|st| st.stx_size)
}
