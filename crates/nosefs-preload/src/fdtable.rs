//! Descriptors: which kernel descriptors are noseFS open file descriptions.
//!
//! Every noseFS open file description (OFD) is backed by a placeholder descriptor that the kernel
//! numbers: a duplicate of one sealed, write-only memfd (the anchor). So the kernel picks the
//! lowest free number, and dup, dup2, close-on-exec, close_range and inheritance behave as for
//! any descriptor; a call the shim misses fails loudly on it (reads: EBADF, the file is
//! write-only; writes: EPERM, it is sealed), never succeeding somewhere else.
//!
//! The anchor is shared by all placeholders, so the kernel's file offset is not the OFD's: the
//! OFD (offset, status flags, directory position) lives here, shared by `Arc` between the
//! descriptors that dup made. Deciding whether a descriptor is ours is one relaxed load from a
//! fixed array, no lock, so descriptors that are not ours cost almost nothing and the check is
//! safe in a signal handler.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use nosefs_core::fs::Fs;
use nosefs_core::Errno;
use parking_lot::RwLock;

use crate::offsets::Offset;

/// Descriptors at or above this number are never noseFS's (open returns EMFILE instead).
pub const MAX_FDS: usize = 1 << 16;

static OURS: [AtomicBool; MAX_FDS] = [const { AtomicBool::new(false) }; MAX_FDS];
static FILES: RwLock<Vec<Option<Arc<OpenFile>>>> = RwLock::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);
static ANCHOR: OnceLock<Result<OwnedFd, Errno>> = OnceLock::new();
/// The shim's own descriptors (the image, the anchor, the offsets area), kept high and out of the program's reach.
static INTERNAL: [AtomicI32; 5] = [const { AtomicI32::new(-1) }; 5];

/// The shim's own descriptors.
#[derive(Debug, Clone, Copy)]
pub enum Internal {
    /// The image (its `flock` is the embedded mode's lock).
    Image = 0,
    /// The anchor memfd, which placeholders duplicate.
    Anchor = 1,
    /// The memfd of offsets shared across fork and exec (`offsets`).
    Offsets = 2,
    /// Daemon mode: the connection's socket (its request area keeps no descriptor).
    Socket = 3,
    /// Embedded mode: the image kept open across fork and exec (`state::image_keeper`).
    ImageKeeper = 4,
}

/// Where the shim's own descriptors go: near the top of the soft limit (at most 4,096), where
/// programs rarely `dup2` (shells keep to 10-255).
pub fn internal_fd_floor() -> i32 {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(4096)
        .min(4096);
    (limit as i32 - 32).max(16)
}

/// Records (or forgets) an internal descriptor.
pub fn set_internal(which: Internal, fd: Option<RawFd>) {
    INTERNAL[which as usize].store(fd.unwrap_or(-1), Ordering::Relaxed);
}

/// Whether `fd` is one of the shim's own descriptors, which the program must not close or
/// replace.
#[inline]
pub fn is_internal(fd: RawFd) -> bool {
    fd >= 0
        && (INTERNAL.iter().any(|i| i.load(Ordering::Relaxed) == fd)
            || LOCK_FDS
                .get(fd as usize)
                .is_some_and(|b| b.load(Ordering::Relaxed)))
}

/// The shim's own descriptors, ascending.
pub fn internal() -> Vec<RawFd> {
    let mut v: Vec<RawFd> = INTERNAL
        .iter()
        .map(|i| i.load(Ordering::Relaxed))
        .filter(|&fd| fd >= 0)
        .collect();
    if LOCK_FD_COUNT.load(Ordering::Relaxed) > 0 {
        v.extend(
            (0..MAX_FDS)
                .filter(|&fd| LOCK_FDS[fd].load(Ordering::Relaxed))
                .map(|fd| fd as RawFd),
        );
    }
    v.sort_unstable();
    v
}

/// Daemon mode's lock descriptors (`OpenFile::lock_fd`): the shim's own too, so a program's
/// close, close_range or dup2 cannot take a description's locks away.
static LOCK_FDS: [AtomicBool; MAX_FDS] = [const { AtomicBool::new(false) }; MAX_FDS];
static LOCK_FD_COUNT: AtomicUsize = AtomicUsize::new(0);

/// A kernel descriptor the shim keeps as its own, high and marked so: in daemon mode one through
/// the FUSE mount (a file's, for record locks and shared mappings, `kernel`; or a description's,
/// for flock and OFD locks); in embedded mode a memfd copy of a shared object dlopen loaded
/// (`ffi::stored::nosefs_stored_library`).
#[derive(Debug)]
pub struct LockFd(OwnedFd);

impl LockFd {
    /// Takes `fd` (which must be below [`MAX_FDS`]) as a lock descriptor.
    pub fn new(fd: OwnedFd) -> Option<LockFd> {
        use std::os::fd::AsRawFd;
        let slot = LOCK_FDS.get(fd.as_raw_fd() as usize)?;
        slot.store(true, Ordering::Relaxed);
        LOCK_FD_COUNT.fetch_add(1, Ordering::Relaxed);
        Some(LockFd(fd))
    }

    /// Takes `opened` (just opened through the FUSE mount, so at the lowest free number) as a
    /// lock descriptor moved out of the way of the numbers programs pick for dup2 (shells keep
    /// to 10-255); the low one is closed. Marked as the shim's own, so close, close_range and
    /// dup2 step around it.
    pub fn moved_high(opened: OwnedFd) -> Option<LockFd> {
        let high = rustix::io::fcntl_dupfd_cloexec(&opened, internal_fd_floor() / 2).ok()?;
        drop(opened);
        LockFd::new(high)
    }

    /// The descriptor number.
    pub fn raw(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }
}

impl AsFd for LockFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Drop for LockFd {
    fn drop(&mut self) {
        LOCK_FDS[self.raw() as usize].store(false, Ordering::Relaxed);
        LOCK_FD_COUNT.fetch_sub(1, Ordering::Relaxed);
    }
}

pub use nosefs_core::vfs::OpenKind as Kind;

/// One noseFS open file description.
#[derive(Debug)]
pub struct OpenFile {
    /// The inode.
    pub ino: u64,
    /// The service's name for it: the inode number in embedded mode, the daemon's token in
    /// daemon mode.
    pub handle: u64,
    /// What it is.
    pub kind: Kind,
    /// Access mode and status flags (O_ACCMODE, O_APPEND, O_NONBLOCK, ...), as F_GETFL reports.
    pub flags: AtomicI32,
    /// The file offset (for a directory, the readdir cookie), shared with the other processes
    /// that inherited the description.
    pub offset: Offset,
    /// The absolute path it was opened by (the working directory after fchdir).
    pub path: Vec<u8>,
    /// Whether the core counts this description as an open of the inode (`Fs::open`).
    counted: AtomicBool,
    /// A directory: the cookie its listing ends at, fixed when the listing starts (0: none).
    pub listing_end: std::sync::atomic::AtomicU64,
    /// Daemon mode: a kernel descriptor of the same file through the FUSE mount, opened at the
    /// first lock, on which the kernel arbitrates this description's locks among processes.
    pub lock_fd: parking_lot::Mutex<Option<LockFd>>,
    /// How the service answers `lseek(SEEK_END)` without asking (`Service::end_of`).
    pub size_watch: std::sync::atomic::AtomicU64,
    /// How the service answers reads without asking (`Service::read_cached`).
    pub read_cache: nosefs_daemon::service::ReadCache,
}

impl OpenFile {
    /// A new description, not yet counted as open.
    pub fn new(ino: u64, handle: u64, kind: Kind, flags: i32, path: Vec<u8>) -> OpenFile {
        OpenFile {
            ino,
            handle,
            kind,
            flags: AtomicI32::new(flags),
            offset: Offset::new(0),
            path,
            counted: AtomicBool::new(false),
            listing_end: std::sync::atomic::AtomicU64::new(0),
            lock_fd: parking_lot::Mutex::new(None),
            size_watch: std::sync::atomic::AtomicU64::new(0),
            read_cache: nosefs_daemon::service::ReadCache::default(),
        }
    }

    /// Embedded mode: counts the open in the core, so the inode outlives its last name while
    /// this is open (the daemon counts its clients' opens itself). False when the inode is
    /// gone (removed since it was found).
    pub fn count_open(&self, fs: &Fs) -> bool {
        if self.kind != Kind::File && self.kind != Kind::Dir || self.counted.load(Ordering::Relaxed)
        {
            return true;
        }
        let counted = fs.open(self.ino).is_ok();
        self.counted.store(counted, Ordering::Relaxed);
        counted
    }

    /// The image was unmounted: the next mount counts the open again.
    pub fn forget_open(&self) {
        self.counted.store(false, Ordering::Relaxed);
    }

    /// Whether the description was opened for reading.
    pub fn readable(&self) -> bool {
        let mode = self.flags.load(Ordering::Relaxed) & libc::O_ACCMODE;
        self.kind != Kind::Path && (mode == libc::O_RDONLY || mode == libc::O_RDWR)
    }

    /// Whether the description was opened for writing.
    pub fn writable(&self) -> bool {
        let mode = self.flags.load(Ordering::Relaxed) & libc::O_ACCMODE;
        self.kind != Kind::Path && (mode == libc::O_WRONLY || mode == libc::O_RDWR)
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if self.counted.load(Ordering::Relaxed) {
            let ino = self.ino;
            let _ = crate::state::with_fs(|fs| fs.close(ino).map_err(|e| e.errno()));
        }
        // A process that never connected (a forked child) holds nothing to release: what it
        // inherited waits in its ticket.
        crate::state::with_remote(|remote| {
            nosefs_daemon::service::Service::close(remote, self.handle)
        });
    }
}

/// Whether `fd` is a noseFS descriptor: one relaxed load.
#[inline]
pub fn is_ours(fd: RawFd) -> bool {
    usize::try_from(fd).is_ok_and(|i| i < MAX_FDS && OURS[i].load(Ordering::Relaxed))
}

/// The open file description behind a noseFS descriptor.
pub fn get(fd: RawFd) -> Option<Arc<OpenFile>> {
    if !is_ours(fd) {
        return None;
    }
    FILES.read().get(fd as usize).cloned().flatten()
}

/// Records that descriptor `fd` refers to `file`. Replaces (and returns) what it referred to.
pub fn insert(fd: RawFd, file: Arc<OpenFile>) -> Option<Arc<OpenFile>> {
    let i = fd as usize;
    assert!(
        i < MAX_FDS,
        "descriptor {fd} above the table was checked by the caller"
    );
    let mut files = FILES.write();
    if files.len() <= i {
        files.resize(i + 1, None);
    }
    let old = files[i].replace(file);
    if old.is_none() {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
    OURS[i].store(true, Ordering::Release);
    drop(files);
    if fd <= 2 {
        // glibc's stdin/stdout/stderr write through internal calls the shim never sees.
        if let Some(hook) = STD_STREAM_HOOK.get() {
            hook(fd);
        }
    }
    old
}

/// Called when descriptor 0, 1 or 2 becomes noseFS's (the C boundary swaps glibc's standard
/// stream for one that reaches the hooks); set once at start-up.
static STD_STREAM_HOOK: std::sync::OnceLock<fn(RawFd)> = std::sync::OnceLock::new();

/// Sets what runs when a standard descriptor becomes noseFS's (see [`insert`]).
pub fn on_std_stream_ours(hook: fn(RawFd)) {
    let _ = STD_STREAM_HOOK.set(hook);
}

/// Takes ownership of descriptor `fd`, which the previous program handed over across exec for
/// the shim alone, unless the shim already uses it.
pub fn take_handed_over(fd: RawFd) -> Option<std::os::fd::OwnedFd> {
    if is_ours(fd) || is_internal(fd) {
        return None;
    }
    crate::sys::take_descriptor(fd)
}

/// Forgets descriptor `fd`; returns its description (dropping it may close the inode).
pub fn remove(fd: RawFd) -> Option<Arc<OpenFile>> {
    if !is_ours(fd) {
        return None;
    }
    let i = fd as usize;
    let mut files = FILES.write();
    OURS[i].store(false, Ordering::Release);
    let old = files.get_mut(i).and_then(Option::take);
    if old.is_some() {
        COUNT.fetch_sub(1, Ordering::Relaxed);
    }
    old
}

/// How many descriptors are noseFS's.
pub fn count() -> usize {
    COUNT.load(Ordering::Relaxed)
}

/// Every open file description (each once per descriptor).
pub fn for_each(mut f: impl FnMut(&OpenFile)) {
    for file in FILES.read().iter().flatten() {
        f(file);
    }
}

/// Every noseFS descriptor with its description.
pub fn all() -> Vec<(RawFd, Arc<OpenFile>)> {
    FILES
        .read()
        .iter()
        .enumerate()
        .filter_map(|(fd, f)| f.clone().map(|f| (fd as RawFd, f)))
        .collect()
}

/// The anchor memfd: sealed (no write, grow or shrink) and reopened write-only.
fn anchor() -> Result<&'static OwnedFd, Errno> {
    ANCHOR
        .get_or_init(|| {
            use rustix::fs::{MemfdFlags, SealFlags};
            let memfd =
                rustix::fs::memfd_create("nosefs", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                    .map_err(|e| Errno(e.raw_os_error()))?;
            let seals = SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL;
            rustix::fs::fcntl_add_seals(&memfd, seals).map_err(|e| Errno(e.raw_os_error()))?;
            let proc_path = format!("/proc/self/fd/{}", memfd.as_raw_fd());
            use rustix::fs::{Mode, OFlags};
            let low = rustix::fs::open(
                proc_path.as_str(),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| Errno(e.raw_os_error()))?;
            // Out of the program's way: it owns the low numbers and may dup2 over any of them.
            let anchor = rustix::io::fcntl_dupfd_cloexec(&low, internal_fd_floor())
                .map_err(|e| Errno(e.raw_os_error()))?;
            set_internal(Internal::Anchor, Some(anchor.as_raw_fd()));
            Ok(anchor)
        })
        .as_ref()
        .map_err(|e| *e)
}

/// A new placeholder descriptor, the lowest free number, registered for `file`.
pub fn open_placeholder(file: OpenFile, cloexec: bool) -> Result<RawFd, Errno> {
    let anchor = anchor()?.as_fd();
    let fd = if cloexec {
        rustix::io::fcntl_dupfd_cloexec(anchor, 0)
    } else {
        rustix::io::dup(anchor)
    }
    .map_err(|e| Errno(e.raw_os_error()))?;
    let raw = fd.as_raw_fd();
    if raw as usize >= MAX_FDS {
        return Err(Errno(libc::EMFILE)); // drops (closes) fd
    }
    std::mem::forget(fd); // the program owns the descriptor now
    insert(raw, Arc::new(file));
    Ok(raw)
}
