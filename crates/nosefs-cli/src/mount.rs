//! `nosefs mount`: serve an image through FUSE.
//!
//! Without `-f` the command starts itself again with `-f` in a new process group, waits until
//! the mount is live (the mountpoint's device changes) and returns; errors of the child (a missing
//! image, an image in use) are printed by the parent. With `-f` it serves in the foreground until
//! the file system is unmounted (umount, fusermount3 -u) or it gets SIGINT or SIGTERM, which
//! unmount it; either way every file is committed and the image marked clean.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL};
use nosefs_core::fs::{Fs, MountOptions, OnDamage};
use nosefs_core::namespace::AtimeMode;
use nosefs_fuse::NoseFuse;

/// Arguments of `nosefs mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// The image file or device-dax device.
    image: PathBuf,
    /// An existing, empty directory that is not already a mount point.
    mountpoint: PathBuf,
    /// Stay in the foreground.
    #[arg(short, long)]
    foreground: bool,
    /// Options, comma separated: sync (every write durable on return), ro (the image is never
    /// written, not even by recovery), errors=ro (a damaged image is mounted read-only, repaired
    /// in memory, instead of refused; errors=refuse is the default), allow_other, dev (device
    /// nodes on the mount can be opened; nodev is the default, as for every FUSE mount), suid
    /// (set-user-id bits take effect; nosuid is the default), relatime (the default), noatime,
    /// strictatime (when reads update access times), threads=N (worker threads, default 2),
    /// compactor (a background thread copies fragmented 64 KiB windows and the file's next
    /// commit takes the copy along, instead of fsync copying them itself: a shorter tail for
    /// small random overwrites, slower larger ones; see docs/benchmarks.md), nodirect_reads
    /// (shim clients whose user owns the image, or root, otherwise read file data from their
    /// own read-only view of the image, not by asking the daemon), stats=PATH (the
    /// daemon counts the shim clients' requests by kind with the time it spent on them, its
    /// sleeps and the connections, and writes the table to PATH at unmount).
    #[arg(short = 'o', value_delimiter = ',')]
    options: Vec<String>,
}

#[derive(Debug, Default)]
struct Options {
    sync: bool,
    read_only: bool,
    errors: OnDamage,
    allow_other: bool,
    /// `stats=PATH`: what the daemon served, written to PATH at unmount.
    stats: Option<std::path::PathBuf>,
    dev: bool,
    suid: bool,
    atime: AtimeMode,
    threads: usize,
    compactor: bool,
    /// Shim clients the image's owner trusts read file data from their own view of the image
    /// (`nodirect_reads`: every read is a request).
    direct_reads: bool,
}

fn parse_options(raw: &[String]) -> Result<Options, String> {
    let mut options = Options {
        threads: 2,
        direct_reads: true,
        ..Options::default()
    };
    for option in raw.iter().filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            None if option == "sync" => options.sync = true,
            None if option == "ro" => options.read_only = true,
            None if option == "rw" => options.read_only = false,
            None if option == "allow_other" => options.allow_other = true,
            None if option == "dev" => options.dev = true,
            None if option == "nodev" => options.dev = false,
            None if option == "suid" => options.suid = true,
            None if option == "relatime" => options.atime = AtimeMode::Relatime,
            None if option == "noatime" => options.atime = AtimeMode::Noatime,
            None if option == "strictatime" => options.atime = AtimeMode::Strictatime,
            None if option == "nosuid" => options.suid = false,
            None if option == "compactor" => options.compactor = true,
            None if option == "nocompactor" => options.compactor = false,
            None if option == "direct_reads" => options.direct_reads = true,
            None if option == "nodirect_reads" => options.direct_reads = false,
            Some(("errors", "ro" | "remount-ro")) => options.errors = OnDamage::ReadOnly,
            Some(("errors", "refuse")) => options.errors = OnDamage::Refuse,
            Some(("stats", path)) if !path.is_empty() => {
                options.stats = Some(std::path::PathBuf::from(path));
            }
            Some(("threads", n)) => {
                options.threads = n
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 64)
                    .ok_or_else(|| format!("threads={n}: want 1 to 64"))?;
            }
            _ => {
                return Err(format!(
                    "unknown option `{option}` (sync, ro, errors=ro|refuse, allow_other, dev, suid, relatime, noatime, strictatime, threads=N, compactor, nodirect_reads, stats=PATH)"
                ))
            }
        }
    }
    Ok(options)
}

/// The device of `path`'s file system: changes when something is mounted on it.
fn device_of(path: &Path) -> Result<u64, String> {
    std::fs::metadata(path)
        .map(|m| m.dev())
        .map_err(|e| format!("mountpoint {}: {e}", path.display()))
}

fn check_mountpoint(path: &Path) -> Result<u64, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("mountpoint {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!("mountpoint {}: not a directory", path.display()));
    }
    let parent = path
        .canonicalize()
        .map_err(|e| format!("mountpoint {}: {e}", path.display()))?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    if device_of(&parent)? != meta.dev() {
        return Err(format!(
            "mountpoint {}: busy (something is already mounted there)",
            path.display()
        ));
    }
    Ok(meta.dev())
}

/// Runs `nosefs mount`.
pub fn run(args: &MountArgs) -> Result<(), String> {
    let options = parse_options(&args.options)?;
    let device = check_mountpoint(&args.mountpoint)?;
    if args.foreground {
        serve(args, &options)
    } else {
        start_in_background(args, device)
    }
}

/// Whether the daemon of the mount at `mountpoint` accepts shim clients yet (a connection,
/// closed at once). Gives up after 10 s (the server said why on its stderr, which we then show).
fn serves_clients(mountpoint: &Path, child: &mut std::process::Child) -> Result<bool, String> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = rustix::fs::stat(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let name = nosefs_daemon::server::socket_name(
        rustix::fs::major(st.st_dev),
        rustix::fs::minor(st.st_dev),
    );
    let addr = SocketAddrUnix::new_abstract_name(&name).map_err(|e| e.to_string())?;
    while Instant::now() < deadline {
        let socket = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| e.to_string())?;
        // Ours, not a daemon of an earlier mount that had the same device number and has not
        // closed its listener yet (ours waits for the name, see `Server::start`).
        let ours = || {
            rustix::net::sockopt::socket_peercred(&socket)
                .is_ok_and(|c| c.pid.as_raw_nonzero().get() as u32 == child.id())
        };
        if rustix::net::connect(&socket, &addr).is_ok() && ours() {
            return Ok(true);
        }
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            return Ok(false); // the caller reports the server's exit
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!("nosefs mount: the daemon does not accept shim clients; the FUSE mount works");
    Ok(true)
}

fn start_in_background(args: &MountArgs, device: u64) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let mut child = std::process::Command::new(exe)
        .arg("mount")
        .arg("-f")
        .args(args.options.iter().flat_map(|o| ["-o", o.as_str()]))
        .arg(&args.image)
        .arg(&args.mountpoint)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    // Recovery takes as long as the image's contents need (linear in the names in use): wait for
    // it as long as the server lives, showing the time on a terminal; Ctrl-C stops both.
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))
            .map_err(|e| format!("cannot handle signals: {e}"))?;
    }
    let started = Instant::now();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut shown_secs = 0;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            clear_progress(terminal && shown_secs > 0);
            let mut why = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut why);
            }
            let why = why.trim().trim_start_matches("nosefs mount: ");
            return Err(if why.is_empty() {
                format!("the server exited with {status}")
            } else {
                why.to_string()
            });
        }
        if device_of(&args.mountpoint).is_ok_and(|d| d != device) {
            // The FUSE mount is live; shim clients can come once the daemon listens too.
            let read_only = rustix::fs::statvfs(&args.mountpoint)
                .is_ok_and(|st| st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
            if read_only {
                forward_warnings(&mut child); // errors=ro's warning about the damage
            }
            if serves_clients(&args.mountpoint, &mut child)? {
                clear_progress(terminal && shown_secs > 0);
                return Ok(());
            }
        }
        if interrupted.load(Ordering::Relaxed) {
            clear_progress(terminal && shown_secs > 0);
            let _ = child.kill();
            let _ = child.wait();
            return Err("interrupted while the image was being mounted".into());
        }
        let secs = started.elapsed().as_secs();
        if terminal && secs >= 1 && secs != shown_secs {
            shown_secs = secs;
            eprint!(
                "\rnosefs mount: mounting {} (recovering its indexes): {secs} s",
                args.image.display()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Passes on what the server said before its mount came up (the damage an errors=ro mount
/// found), without waiting for more.
fn forward_warnings(child: &mut std::process::Child) {
    use std::io::Write;
    let Some(err) = child.stderr.as_mut() else {
        return;
    };
    if rustix::fs::fcntl_setfl(&*err, rustix::fs::OFlags::NONBLOCK).is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = rustix::io::read(&*err, &mut buf) {
        let _ = std::io::stderr().write_all(&buf[..n]);
    }
}

fn clear_progress(shown: bool) {
    if shown {
        eprintln!();
    }
}

fn serve(args: &MountArgs, options: &Options) -> Result<(), String> {
    let mount_options = MountOptions {
        sync: options.sync,
        read_only: options.read_only,
        errors: options.errors,
        atime: options.atime,
        ..MountOptions::default()
    };
    let fs = crate::when_image_free(|| Fs::mount(&args.image, &mount_options))
        .map_err(|e| e.to_string())?;
    if let Some(damage) = &fs.mount_report().damage {
        eprintln!(
            "nosefs mount: {} is damaged ({}); mounted read-only over a copy repaired in memory \
             ({} problems); the image is unchanged: unmount and run nosefs fsck --repair",
            args.image.display(),
            damage.refused,
            damage.repaired_in_memory
        );
    }
    let read_only = fs.is_read_only();
    let fs = Arc::new(fs);
    if options.compactor {
        if let Err(e) = Fs::start_compactor(&fs) {
            eprintln!("nosefs mount: no background compactor ({e}); fsync rewrites fragmented windows itself");
        }
    }
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(
            args.image
                .canonicalize()
                .unwrap_or_else(|_| args.image.clone())
                .display()
                .to_string(),
        ),
        MountOption::Subtype("nosefs".into()),
        MountOption::DefaultPermissions,
    ];
    if read_only {
        config.mount_options.push(MountOption::RO);
    }
    config.mount_options.push(if options.dev {
        MountOption::Dev
    } else {
        MountOption::NoDev
    });
    config.mount_options.push(if options.suid {
        MountOption::Suid
    } else {
        MountOption::NoSuid
    });
    if options.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(options.threads);
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| format!("cannot handle signals: {e}"))?;
    }
    let frontend = NoseFuse::shared(Arc::clone(&fs));
    let kernel_view = frontend.kernel_view();
    let notifier_slot = frontend.notifier_slot();
    let session = fuser::spawn_mount(frontend, &args.mountpoint, &config)
        .map_err(|e| format!("cannot mount at {}: {e}", args.mountpoint.display()))?;
    let _ = notifier_slot.set(session.notifier());
    // Shim clients (`nosefs run --at MOUNTPOINT`) are served beside the kernel; what they change
    // is invalidated in the kernel's caches before they get their reply.
    // A read-only mount serves them too: every change they ask for is EROFS in the core.
    let server = {
        let server_options = nosefs_daemon::server::Options {
            allow_other: options.allow_other,
            stats: options.stats.is_some(),
            direct_reads: options.direct_reads,
            invalidate: Some(Box::new(nosefs_fuse::Invalidator::new(
                session.notifier(),
                kernel_view,
            ))),
        };
        match nosefs_daemon::server::Server::start(
            Arc::clone(&fs),
            &args.mountpoint,
            server_options,
        ) {
            Ok(server) => Some(server),
            Err(e) => {
                eprintln!("nosefs mount: shim clients cannot be served ({e}); the FUSE mount can");
                None
            }
        }
    };
    while !stop.load(Ordering::Relaxed) && !session.guard.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Clients first (they get EIO), then the kernel, then the image.
    if let (Some(path), Some(report)) = (
        &options.stats,
        server.as_ref().and_then(|s| s.stats_report()),
    ) {
        if let Err(e) = std::fs::write(path, report) {
            eprintln!(
                "nosefs mount: cannot write the stats to {}: {e}",
                path.display()
            );
        }
    }
    drop(server);
    let ended = if session.guard.is_finished() {
        // Unmounted from outside: the session ended and destroy committed everything.
        session
            .join()
            .map_err(|e| format!("the session failed: {e}"))
    } else {
        session
            .umount_and_join()
            .map_err(|e| format!("unmount failed: {e}"))
    };
    // Its thread holds a strong reference only while it rewrites a window: stopped first, so
    // the last reference is ours.
    fs.stop_compactor();
    if let Ok(fs) = Arc::try_unwrap(fs) {
        drop(fs.unmount());
    }
    ended
}
