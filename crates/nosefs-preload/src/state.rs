//! This process's noseFS: the configuration from the environment, the image mounted in the
//! process (embedded mode: mapped and mounted at the first noseFS call, unmounted at exit and
//! before exec), the caller's credentials and umask, and what happens at fork.
//!
//! Embedded mode serves an image in one process at a time (the image's `flock`). A second process
//! that wants it gets EBUSY and one line naming the holder. A process that holds the image gives
//! it up at fork and spawn (see [`before_fork`]), so a shell can run one child at a time on it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

use nosefs_core::namespace::perm::Cred;
use nosefs_core::namespace::{Fs, MountOptions};
use nosefs_core::{Errno, Error};
use parking_lot::RwLock;

/// Environment variable: the image to serve.
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

/// What the environment asked for.
#[derive(Debug)]
pub struct Config {
    /// The image file or device.
    pub image: PathBuf,
    /// The prefix, absolute, without a trailing slash.
    pub prefix: Vec<u8>,
    /// Commit every write on return.
    pub sync: bool,
    /// Populate the image's mapping at mount.
    pub populate: bool,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
static FS: RwLock<Option<Fs>> = RwLock::new(None);
/// Set in a forked child while its parent still holds the image.
static FORKED_WHILE_MOUNTED: AtomicBool = AtomicBool::new(false);
static EXIT_HOOK_REGISTERED: AtomicBool = AtomicBool::new(false);
static CRED: RwLock<Option<Cred>> = RwLock::new(None);
static UMASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The configuration, read from the environment once.
pub fn config() -> Option<&'static Config> {
    CONFIG.get_or_init(read_config).as_ref()
}

fn read_config() -> Option<Config> {
    let image = std::env::var_os(ENV_IMAGE)?;
    let at = std::env::var_os(ENV_AT)?;
    let mut prefix = std::os::unix::ffi::OsStrExt::as_bytes(at.as_os_str()).to_vec();
    while prefix.len() > 1 && prefix.ends_with(b"/") {
        prefix.pop();
    }
    if !prefix.starts_with(b"/") || prefix.len() < 2 {
        say("NOSEFS_AT must be an absolute directory other than /; noseFS is off");
        return None;
    }
    let options = std::env::var(ENV_OPTIONS).unwrap_or_default();
    let option = |name: &str| options.split(',').any(|x| x == name);
    Some(Config {
        image: PathBuf::from(image),
        prefix,
        sync: option("sync"),
        populate: option("populate"),
    })
}

/// Prints one line on stderr, with raw system calls (never through the hooked `write`).
pub fn say(line: &str) {
    let text = format!("nosefs: {line}\n");
    let _ = rustix::io::write(rustix::stdio::stderr(), text.as_bytes());
}

/// Runs `f` on the mounted file system, mounting it first if this process has not yet.
pub fn with_fs<T>(f: impl FnOnce(&Fs) -> Result<T, Errno>) -> Result<T, Errno> {
    if FORKED_WHILE_MOUNTED.load(Ordering::Relaxed) {
        say(&format!(
            "process {} was forked while its parent held the image; noseFS calls in it fail with EBUSY until it execs (the daemon mode serves both)",
            rustix::process::getpid().as_raw_nonzero()
        ));
        return Err(Errno::EBUSY);
    }
    {
        let fs = FS.read_recursive();
        if let Some(fs) = fs.as_ref() {
            return f(fs);
        }
    }
    mount()?;
    let fs = FS.read_recursive();
    f(fs.as_ref().ok_or(Errno::EIO)?)
}

fn mount() -> Result<(), Errno> {
    let mut slot = FS.write();
    if slot.is_some() {
        return Ok(());
    }
    let config = config().ok_or(Errno::ENOENT)?;
    let options = MountOptions {
        sync: config.sync,
        populate: config.populate,
        fd_floor: Some(crate::fdtable::internal_fd_floor()),
        ..MountOptions::default()
    };
    match Fs::mount(&config.image, &options) {
        Ok(fs) => {
            crate::fdtable::set_internal(
                crate::fdtable::Internal::Image,
                fs.image().region().descriptor(),
            );
            crate::fdtable::for_each(|file| file.count_open(&fs));
            *slot = Some(fs);
            if !EXIT_HOOK_REGISTERED.swap(true, Ordering::Relaxed) {
                crate::ffi::register_exit_hook();
            }
            Ok(())
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
            say(&format!("cannot mount {}: {e}", config.image.display()));
            Err(Errno::EIO)
        }
    }
}

/// Commits everything and gives the image up. Returns whether it was mounted.
pub fn unmount() -> bool {
    let mut slot = FS.write();
    let Some(fs) = slot.take() else {
        return false;
    };
    crate::fdtable::for_each(|file| file.forget_open());
    drop(fs.unmount());
    crate::fdtable::set_internal(crate::fdtable::Internal::Image, None);
    true
}

/// Whether the image is mounted in this process.
pub fn is_mounted() -> bool {
    FS.read_recursive().is_some()
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
    use rustix::fs::{Mode, OFlags};
    let path = std::ffi::CStr::from_bytes_with_nul(path).ok()?;
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8(out).ok()
}

/// At exit: flush stdio streams (which may hold noseFS data), then commit and unmount.
pub fn at_exit() {
    unmount();
}

/// Before fork or spawn: the holder commits and gives the image up, so that the child (which
/// usually execs a program that wants it, often through a descriptor the shell opened for it)
/// can take it; the parent mounts again at its next call. Open descriptions are (inode, offset,
/// flags) and stay valid across the remount; their offsets are shared with the child
/// (`offsets`). What embedded mode cannot give: an inode the child removes while the parent has
/// it open is gone when the parent returns (its calls then fail with ENOENT). The daemon mode
/// will not have that limit.
pub fn before_fork() {
    if is_mounted() {
        unmount();
    }
}

/// In a forked child: if the parent still holds the image, this copy of its state is stale.
pub fn in_forked_child() {
    if is_mounted() {
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

/// Forgets the cached credentials (after setuid, setgroups, ...).
pub fn invalidate_cred() {
    *CRED.write() = None;
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
