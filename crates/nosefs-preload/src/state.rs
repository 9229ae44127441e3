//! This process's noseFS: the configuration from the environment, the backend that serves it,
//! the caller's credentials and umask, and what happens at fork.
//!
//! Two backends serve the same calls ([`nosefs_daemon::service::Service`]):
//! - **embedded** (`NOSEFS_IMAGE` set): the image mapped and mounted in this process at the first
//!   noseFS call, unmounted at exit and before exec. One process at a time holds it (the image's
//!   `flock`); a second gets EBUSY and one line naming the holder. A process that holds the image
//!   gives it up at fork and spawn (see [`before_fork`]), so a shell can run one child at a time.
//! - **daemon** (no image: `NOSEFS_AT` is a `nosefs mount` mount point): a connection to the
//!   mount's daemon, made at the first noseFS call, whose server checks every call with this
//!   process's credentials. Every process on the machine shares the image. A forked child makes
//!   its own connection at its first call and claims the descriptions its parent handed it
//!   ([`hold_for_child`]); an exec'd program claims those its predecessor handed over.

use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::OnceLock;

use std::sync::atomic::AtomicU64;

use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::perm::Cred;
use nosefs_core::{Errno, Error};
use nosefs_daemon::client::Remote;
use nosefs_daemon::service::{Handle, Local, Service};
use parking_lot::RwLock;

/// Environment variable: the image to serve in this process (embedded mode); without it, the
/// daemon of the noseFS mount at `NOSEFS_AT` serves.
pub const ENV_IMAGE: &str = "NOSEFS_IMAGE";
/// Environment variable: the absolute directory under which paths are noseFS's.
pub const ENV_AT: &str = "NOSEFS_AT";
/// Environment variable: mount options, comma-separated: `sync` (every write durable on return),
/// `populate` (map the image with its pages populated: no page faults later, a slower mount).
pub const ENV_OPTIONS: &str = "NOSEFS_OPTIONS";
/// Environment variable: the working directory inside noseFS, passed across exec.
pub const ENV_CWD: &str = "NOSEFS_CWD";
/// Environment variable: descriptor of the table of noseFS descriptors passed across exec.
pub const ENV_EXEC_TABLE: &str = "NOSEFS_EXEC_TABLE";
/// Environment variable: the image descriptor kept open across exec (`image_keeper`).
pub const ENV_IMAGE_FD: &str = "NOSEFS_IMAGE_FD";

/// A path the configuration holds, in fixed storage: reading the configuration allocates
/// nothing, since the first hook to ask may run inside the program's allocator (jemalloc's
/// initialization reads /etc/malloc.conf with its lock held).
#[derive(Clone)]
pub struct FixedPath {
    bytes: [u8; libc::PATH_MAX as usize],
    len: usize,
}

impl FixedPath {
    fn new(from: &[u8]) -> Option<FixedPath> {
        let mut bytes = [0u8; libc::PATH_MAX as usize];
        bytes.get_mut(..from.len())?.copy_from_slice(from);
        Some(FixedPath {
            bytes,
            len: from.len(),
        })
    }

    /// The path as a file-system path.
    pub fn path(&self) -> &std::path::Path {
        std::path::Path::new(std::ffi::OsStr::from_bytes(self))
    }
}

impl std::ops::Deref for FixedPath {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Debug for FixedPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.path())
    }
}

/// What the environment asked for.
#[derive(Debug)]
pub struct Config {
    /// The image file or device (embedded mode), or `None` (daemon mode).
    pub image: Option<FixedPath>,
    /// The prefix, absolute, without a trailing slash.
    pub prefix: FixedPath,
    /// Commit every write on return.
    pub sync: bool,
    /// Populate the image's mapping at mount.
    pub populate: bool,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
/// What serves this process's noseFS calls.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per process, in a static
pub enum Backend {
    /// The image, mounted in this process.
    Embedded(Fs),
    /// A connection to the mount's daemon.
    Daemon(Remote),
}

static FS: RwLock<Option<Backend>> = RwLock::new(None);
/// Set in a forked child of a daemon client: the connection it inherited is its parent's.
static CONNECTION_STALE: AtomicBool = AtomicBool::new(false);
/// Descriptions handed to this process (by its parent at fork, or its predecessor at exec) that
/// it claims at its first connection; 0 for none.
static PENDING_TICKET: AtomicU64 = AtomicU64::new(0);
/// Set in a forked child while its parent still holds the image.
static FORKED_WHILE_MOUNTED: AtomicBool = AtomicBool::new(false);
static EXIT_HOOK_REGISTERED: AtomicBool = AtomicBool::new(false);
/// When this process last failed to reach its daemon (CLOCK_MONOTONIC ns; 0: never). For
/// [`UNREACHABLE_RETRY_NS`] after, a call fails at once instead of trying again: each try waits
/// up to 80 ms for a mount that may be coming up ([`Remote::connect`]), and a program whose
/// daemon is gone made every call wait that long.
static UNREACHABLE_SINCE_NS: AtomicU64 = AtomicU64::new(0);
const UNREACHABLE_RETRY_NS: u64 = 1_000_000_000;
/// The process this state belongs to (set at start-up and in a forked child; 0 before). A child
/// made with `clone(CLONE_VM)` and no `CLONE_THREAD` (stress-ng's dup race, helpers of some
/// runtimes) shares this memory, and with it the image or the connection, without being this
/// process, and runs no fork handler: its end must leave them to their owner.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
static CRED: RwLock<Option<Cred>> = RwLock::new(None);
static UMASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The configuration, read from the environment once.
pub fn config() -> Option<&'static Config> {
    CONFIG.get_or_init(read_config).as_ref()
}

/// Reads the environment with libc's `getenv` (no allocation, no lock) into fixed storage.
fn read_config() -> Option<Config> {
    let image = crate::sys::env_bytes(c"NOSEFS_IMAGE").filter(|i| !i.is_empty());
    let mut prefix = crate::sys::env_bytes(c"NOSEFS_AT")?;
    while prefix.len() > 1 && prefix.ends_with(b"/") {
        prefix = &prefix[..prefix.len() - 1];
    }
    let (Some(prefix_path), true) = (
        FixedPath::new(prefix),
        prefix.starts_with(b"/") && prefix.len() >= 2,
    ) else {
        say_static("NOSEFS_AT must be an absolute directory other than / and shorter than PATH_MAX; noseFS is off");
        return None;
    };
    let image = match image.map(FixedPath::new) {
        Some(None) => {
            say_static("NOSEFS_IMAGE is longer than PATH_MAX; noseFS is off");
            return None;
        }
        other => other.flatten(),
    };
    let options = crate::sys::env_bytes(c"NOSEFS_OPTIONS").unwrap_or_default();
    let option = |name: &[u8]| options.split(|&b| b == b',').any(|x| x == name);
    Some(Config {
        image,
        prefix: prefix_path,
        sync: option(b"sync"),
        populate: option(b"populate"),
    })
}

/// [`say`] of a fixed line, allocating nothing (three raw writes).
fn say_static(line: &str) {
    let err = rustix::stdio::stderr();
    let _ = rustix::io::write(err, b"nosefs: ");
    let _ = rustix::io::write(err, line.as_bytes());
    let _ = rustix::io::write(err, b"\n");
}

/// Prints one line on stderr, with raw system calls (never through the hooked `write`).
pub use crate::sys::say;

/// Whether this process is served by a daemon.
pub fn daemon_mode() -> bool {
    config().is_some_and(|c| c.image.is_none())
}

/// Runs `f` on the service, mounting the image or connecting to the daemon first if this
/// process has not yet.
pub fn with_service<T>(f: impl FnOnce(&dyn Service) -> Result<T, Errno>) -> Result<T, Errno> {
    with_backend(|backend| match backend {
        Backend::Embedded(fs) => {
            let prefix = config().map_or(&b""[..], |c| &c.prefix[..]);
            f(&Local {
                fs,
                prefix,
                cred: &cred,
            })
        }
        Backend::Daemon(remote) => f(remote),
    })
}

/// Runs `f` on the mounted file system (embedded mode only: EOPNOTSUPP in daemon mode).
pub fn with_fs<T>(f: impl FnOnce(&Fs) -> Result<T, Errno>) -> Result<T, Errno> {
    with_backend(|backend| match backend {
        Backend::Embedded(fs) => f(fs),
        Backend::Daemon(_) => Err(Errno(libc::EOPNOTSUPP)),
    })
}

fn with_backend<T>(f: impl FnOnce(&Backend) -> Result<T, Errno>) -> Result<T, Errno> {
    if FORKED_WHILE_MOUNTED.load(Ordering::Relaxed) {
        say(&format!(
            "process {} was forked while its parent held the image; noseFS calls in it fail with EBUSY until it execs (the daemon mode serves both)",
            rustix::process::getpid().as_raw_nonzero()
        ));
        return Err(Errno::EBUSY);
    }
    if !CONNECTION_STALE.load(Ordering::Relaxed) {
        let backend = FS.read_recursive();
        if let Some(backend) = backend.as_ref() {
            return f(backend);
        }
    }
    mount()?;
    let backend = FS.read_recursive();
    f(backend.as_ref().ok_or(Errno::EIO)?)
}

fn mount() -> Result<(), Errno> {
    let mut slot = FS.write();
    if CONNECTION_STALE.swap(false, Ordering::Relaxed) {
        // The parent's connection: this process gets its own. Its area was not inherited
        // (`Area::open`), so it is left, not unmapped.
        if let Some(Backend::Daemon(stale)) = slot.take() {
            stale.leave();
        }
    }
    if slot.is_some() {
        return Ok(());
    }
    let config = config().ok_or(Errno::ENOENT)?;
    let backend = match &config.image {
        Some(image) => Backend::Embedded(mount_image(image.path(), config)?),
        None => Backend::Daemon(connect(config)?),
    };
    *slot = Some(backend);
    if !EXIT_HOOK_REGISTERED.swap(true, Ordering::Relaxed) {
        crate::sys::register_exit_hook(exit_hook);
    }
    Ok(())
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

fn connect(config: &Config) -> Result<Remote, Errno> {
    let since = UNREACHABLE_SINCE_NS.load(Ordering::Relaxed);
    if since != 0 && monotonic_ns().saturating_sub(since) < UNREACHABLE_RETRY_NS {
        return Err(Errno::EIO);
    }
    let reached = reach_daemon(config);
    let now = if reached.is_err() {
        monotonic_ns().max(1)
    } else {
        0
    };
    UNREACHABLE_SINCE_NS.store(now, Ordering::Relaxed);
    reached
}

fn reach_daemon(config: &Config) -> Result<Remote, Errno> {
    // A connection whose socket was taken over before its raise (`Remote::raise_fd`) is made
    // again, a few times.
    let mut attempts = 0;
    loop {
        attempts += 1;
        match connect_once(config) {
            Err(Errno::ENOTSOCK) if attempts < 4 => continue,
            other => return other,
        }
    }
}

fn connect_once(config: &Config) -> Result<Remote, Errno> {
    let mut remote = match Remote::connect(&config.prefix) {
        Ok(Some(remote)) => remote,
        Ok(None) => {
            say(&format!(
                "{} is not a noseFS mount (start `nosefs mount IMAGE {}`, or set NOSEFS_IMAGE for embedded mode)",
                String::from_utf8_lossy(&config.prefix),
                String::from_utf8_lossy(&config.prefix)
            ));
            return Err(Errno::EIO);
        }
        Err(e) => {
            say(&format!(
                "cannot reach the daemon of {}: {}",
                String::from_utf8_lossy(&config.prefix),
                std::io::Error::from_raw_os_error(e.0)
            ));
            return Err(e);
        }
    };
    // The connection's descriptors are the shim's own: high, and stepped around by close_range
    // (a child closing every descriptor before exec must not take them).
    let socket = remote.raise_fd(crate::fdtable::internal_fd_floor())?;
    crate::fdtable::set_internal(crate::fdtable::Internal::Socket, Some(socket));
    let ticket = PENDING_TICKET.swap(0, Ordering::Relaxed);
    if ticket != 0 {
        let mut keep: Vec<Handle> = Vec::new();
        crate::fdtable::for_each(|file| keep.push(file.handle));
        if remote.claim(ticket, &keep).is_err() {
            say("the noseFS descriptions this process inherited were released before it claimed them; they are not usable");
        }
    }
    Ok(remote)
}

fn mount_image(image: &std::path::Path, config: &Config) -> Result<Fs, Errno> {
    let keeper = image_keeper(image);
    let mut options = MountOptions {
        sync: config.sync,
        populate: config.populate,
        fd_floor: Some(crate::fdtable::internal_fd_floor()),
        ..MountOptions::default()
    };
    let mut mounted = Fs::mount(image, &options);
    if let (Err(e), Some(fd)) = (&mounted, keeper) {
        if matches!(e.errno().0, libc::EACCES | libc::EPERM) {
            // Credentials dropped since the image was first opened (a server's child after
            // setuid): the kernel keeps a file system across that; so does this process, through
            // the descriptor it inherited. noseFS checks every call with the new credentials.
            options.image_fd = Some(fd);
            mounted = Fs::mount(image, &options);
        }
    }
    match mounted {
        Ok(fs) => {
            crate::fdtable::set_internal(
                crate::fdtable::Internal::Image,
                fs.image().region().descriptor(),
            );
            crate::fdtable::for_each(|file| {
                file.count_open(&fs);
            });
            Ok(fs)
        }
        Err(Error::InUse(path)) => {
            say(&format!(
                "{} is in use by {}; this process ({}) cannot serve it at the same time (EBUSY)",
                path.display(),
                holder_of(&path),
                rustix::process::getpid().as_raw_nonzero()
            ));
            Err(Errno::EBUSY)
        }
        Err(e) => {
            say(&format!("cannot mount {}: {e}", image.display()));
            Err(Errno::EIO)
        }
    }
}

/// Embedded mode: a descriptor of the image that stays open across fork and exec (never
/// close-on-exec; named to an exec'd program by `NOSEFS_IMAGE_FD`), opened at the first mount
/// while the process can, or adopted from the program that exec'd this one when it is the same
/// file. A process whose credentials no longer open the image (dropped with setuid) mounts
/// through it; its record lock keeps two such processes from mapping the image at once.
static KEEPER: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();

/// The image keeper's descriptor (see [`KEEPER`]), if there is one.
pub fn image_keeper(image: &std::path::Path) -> Option<i32> {
    *KEEPER.get_or_init(|| {
        let fd = adopt_keeper(image).or_else(|| open_keeper(image))?;
        crate::fdtable::set_internal(crate::fdtable::Internal::ImageKeeper, Some(fd));
        Some(fd)
    })
}

/// At start-up in embedded mode: takes the image keeper (see [`KEEPER`]).
pub fn keep_image() {
    if let Some(image) = config().and_then(|c| c.image.as_ref()).map(FixedPath::path) {
        image_keeper(image);
    }
}

/// The keeper named by `NOSEFS_IMAGE_FD`, if that descriptor is open on `image`.
fn adopt_keeper(image: &std::path::Path) -> Option<i32> {
    let fd: i32 = std::env::var(ENV_IMAGE_FD).ok()?.parse().ok()?;
    let want = rustix::fs::stat(image).ok()?;
    let have = crate::sys::kernel_dev_ino(fd)?;
    (have == (want.st_dev, want.st_ino)).then_some(fd)
}

/// The keeper as the environment variable an exec'd program finds it by, if there is one.
pub fn keeper_env() -> Option<String> {
    let fd = (*KEEPER.get()?)?;
    Some(format!("{ENV_IMAGE_FD}={fd}"))
}

/// Opens the keeper: the image read-write, moved up among the shim's descriptors.
fn open_keeper(image: &std::path::Path) -> Option<i32> {
    use rustix::fs::{Mode, OFlags};
    let file = rustix::fs::open(image, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let high = rustix::io::fcntl_dupfd_cloexec(&file, crate::fdtable::internal_fd_floor()).ok()?;
    rustix::io::fcntl_setfd(&high, rustix::io::FdFlags::empty()).ok()?;
    Some(std::os::fd::IntoRawFd::into_raw_fd(high))
}

/// Commits everything and gives the image up (or closes the connection, which releases the
/// descriptions it held). Returns whether anything was mounted.
pub fn unmount() -> bool {
    give_up(false)
}

/// [`unmount`], at the process's end: the connection's area is left for the kernel to unmap.
fn give_up(at_exit: bool) -> bool {
    let mut slot = FS.write();
    let Some(backend) = slot.take() else {
        return false;
    };
    match backend {
        Backend::Embedded(fs) => {
            crate::fdtable::for_each(|file| file.forget_open());
            drop(fs.unmount());
            crate::fdtable::set_internal(crate::fdtable::Internal::Image, None);
        }
        // The parent's connection in a forked child, which never had its area mapped; and at
        // exit, where the kernel unmaps it without the TLB shootdown an munmap would send to
        // every CPU this process ran on (tens of microseconds per short process on a VM whose
        // idle CPUs halt).
        Backend::Daemon(remote) if at_exit || CONNECTION_STALE.load(Ordering::Relaxed) => {
            remote.leave()
        }
        Backend::Daemon(remote) => drop(remote),
    }
    true
}

/// Whether the image is mounted (or the daemon connected) in this process.
pub fn is_mounted() -> bool {
    !CONNECTION_STALE.load(Ordering::Relaxed) && FS.read_recursive().is_some()
}

/// The connection to the daemon, if this process has one of its own.
pub fn with_remote<T>(f: impl FnOnce(&Remote) -> T) -> Option<T> {
    if CONNECTION_STALE.load(Ordering::Relaxed) {
        return None;
    }
    match FS.read_recursive().as_ref() {
        Some(Backend::Daemon(remote)) => Some(f(remote)),
        _ => None,
    }
}

/// Daemon mode, before a fork or exec: a ticket holding a reference on every description of
/// this process (so they outlive this process's connection until the new process claims them),
/// or 0 when there is nothing to hand over.
pub fn hold_for_child(handles: &[Handle]) -> u64 {
    if handles.is_empty() || !daemon_mode() {
        return 0;
    }
    with_service(|_| Ok(()))
        .ok()
        .and_then(|()| with_remote(|r| r.hold(handles).ok()).flatten())
        .unwrap_or(0)
}

/// Daemon mode, after a fork: the parent ties the child's ticket to it (its end releases what
/// it did not claim); a failed fork claims its own ticket back.
pub fn after_fork_in_parent(ticket: u64, child: i32) {
    if ticket == 0 {
        return;
    }
    with_remote(|r| {
        if child > 0 {
            let _ = r.bind(ticket, child);
        } else {
            let mut keep: Vec<Handle> = Vec::new();
            crate::fdtable::for_each(|file| keep.push(file.handle));
            let _ = r.claim(ticket, &keep);
        }
    });
}

/// Daemon mode: this process claims `ticket` at its first connection (a forked child, or an
/// exec'd program).
pub fn claim_at_connect(ticket: u64) {
    PENDING_TICKET.store(ticket, Ordering::Relaxed);
}

/// Daemon mode: an exec failed after its ticket was made; claim it back at the next call.
pub fn exec_failed(ticket: u64) {
    if ticket != 0 {
        claim_at_connect(ticket);
    }
}

/// Which process holds the image's lock, from /proc/locks (`process N`), as best known.
fn holder_of(image: &std::path::Path) -> String {
    let Ok(stat) = rustix::fs::stat(image) else {
        return "another process".into();
    };
    let needle = format!(":{} ", stat.st_ino);
    read_small(b"/proc/locks\0")
        .and_then(|locks| {
            locks.lines().find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let pid = fields
                    .iter()
                    .position(|f| f.contains(':') && format!("{f} ").ends_with(&needle))?;
                fields
                    .get(pid.checked_sub(1)?)
                    .map(|p| format!("process {p}"))
            })
        })
        .unwrap_or_else(|| "another process".into())
}

/// Reads a small file with raw system calls.
pub fn read_small(path: &[u8]) -> Option<String> {
    let path = std::ffi::CStr::from_bytes_with_nul(path).ok()?;
    nosefs_daemon::client::read_small(path)
}

/// At exit: flush stdio streams (which may hold noseFS data), then commit and unmount.
/// Registered at the first mount: unmounts at exit.
extern "C" fn exit_hook() {
    // Buffered stdio data may be bound for noseFS: flush it while the image is mounted, outside
    // the guard, so that the shim's streams reach the hooks (inside it they would pass to the
    // kernel's placeholder).
    crate::sys::flush_all_streams();
    let _guard = crate::sys::Guard::enter();
    at_exit();
}

/// The end of this process: commits and gives up the image or the connection, unless this is
/// a child sharing its parent's memory ([`OWNER_PID`]), whose parent goes on with them.
pub fn at_exit() {
    if is_owner() {
        give_up(true);
    }
}

/// Records this process as the owner of the shim's state (at start-up, and in a forked child).
pub fn note_owner() {
    OWNER_PID.store(
        rustix::process::getpid().as_raw_nonzero().get(),
        Ordering::Relaxed,
    );
}

/// Whether this process owns the shim's state: false in a child that shares its parent's memory.
fn is_owner() -> bool {
    let owner = OWNER_PID.load(Ordering::Relaxed);
    owner == 0 || owner == rustix::process::getpid().as_raw_nonzero().get()
}

/// Before fork or spawn: in embedded mode the holder commits and gives the image up, so that
/// the child (which usually execs a program that wants it, often through a descriptor the
/// shell opened for it) can take it; the parent mounts again at its next call. Open
/// descriptions are (inode, offset, flags) and stay valid across the remount; their offsets are
/// shared with the child (`offsets`). What embedded mode cannot give: an inode the child
/// removes while the parent has it open is gone when the parent returns (its calls then fail
/// with ENOENT). The daemon mode has neither limit and keeps its connection.
pub fn before_fork() {
    if !daemon_mode() && is_mounted() {
        unmount();
    }
}

/// In a forked child: in embedded mode, if the parent still holds the image, this copy of its
/// state is stale; in daemon mode the connection is the parent's, and the child makes its own
/// at its first call.
pub fn in_forked_child() {
    note_owner();
    if daemon_mode() {
        // Set whether or not the parent had connected (the lock is not taken: its word would
        // be copied into the child for nothing); `mount` finds no connection either way.
        CONNECTION_STALE.store(true, Ordering::Relaxed);
    } else if is_mounted() {
        FORKED_WHILE_MOUNTED.store(true, Ordering::Relaxed);
    }
}

/// The credentials noseFS checks permissions against (cached; set*id hooks invalidate them).
pub fn cred() -> Cred {
    if let Some(cred) = CRED.read().as_ref() {
        return cred.clone();
    }
    let cred = Cred {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        groups: rustix::process::getgroups()
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.as_raw())
            .collect(),
    };
    *CRED.write() = Some(cred.clone());
    cred
}

/// After setuid, setgroups, ...: forgets the cached credentials, and tells the daemon (if this
/// process is connected to one), which reads the new ones from /proc itself.
pub fn credentials_changed() {
    *CRED.write() = None;
    with_remote(|remote| {
        if remote.recred().is_err() {
            say(
                "the daemon did not take this process's new credentials; its noseFS calls may fail",
            );
        }
    });
}

/// The process's umask (read once, then tracked by the `umask` hook).
pub fn umask() -> u32 {
    let known = UMASK.load(Ordering::Relaxed);
    if known != u32::MAX {
        return known;
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    rustix::process::umask(old);
    let mask = old.as_raw_mode();
    UMASK.store(mask, Ordering::Relaxed);
    mask
}

/// Records a umask the program set.
pub fn set_umask(mask: u32) {
    UMASK.store(mask & 0o777, Ordering::Relaxed);
}
