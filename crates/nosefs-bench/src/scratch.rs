//! Scratch file systems the harness sets up and tears down itself: a private tmpfs, the seed-000
//! ramdisk baselines (a loop device over a file in /dev/shm, formatted and mounted), and noseFS
//! through its FUSE frontend (served by this process, so the kernel's round trips are measured
//! exactly as `nosefs mount` incurs them).
//!
//! Each is mounted under a fresh directory in the system temporary directory and registered with
//! [`crate::cleanup`], so that it is unmounted, detached and deleted when the [`ScratchMount`]
//! drops and also when the run is interrupted.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cleanup::{self, Registered, Undo};

/// A ramdisk kind: a file system on a loop device over a file in /dev/shm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamdiskKind {
    /// ext2 (no journal).
    Ext2,
    /// ext3.
    Ext3,
    /// ext4, default options (ordered data, delayed allocation).
    Ext4,
    /// ext4 with `data=journal`.
    Ext4Journal,
    /// ext4 with `nodelalloc`.
    Ext4Nodelalloc,
    /// xfs, default allocation groups.
    Xfs,
    /// xfs with 464 allocation groups (seed 000's xfs-ag464).
    XfsAg464,
    /// btrfs.
    Btrfs,
    /// f2fs (seed 000's flash-aware file system).
    F2fs,
    /// nilfs2 (seed 000's log-structured file system).
    Nilfs2,
}

impl RamdiskKind {
    /// Every kind, in the order of seed 000 (f2fs and nilfs2 run only where the kernel has them).
    pub const ALL: [RamdiskKind; 10] = [
        RamdiskKind::Ext2,
        RamdiskKind::Ext3,
        RamdiskKind::Ext4,
        RamdiskKind::Ext4Journal,
        RamdiskKind::Ext4Nodelalloc,
        RamdiskKind::Xfs,
        RamdiskKind::XfsAg464,
        RamdiskKind::Btrfs,
        RamdiskKind::F2fs,
        RamdiskKind::Nilfs2,
    ];

    /// The name used in `ramdisk:NAME`.
    pub fn name(self) -> &'static str {
        match self {
            RamdiskKind::Ext2 => "ext2",
            RamdiskKind::Ext3 => "ext3",
            RamdiskKind::Ext4 => "ext4",
            RamdiskKind::Ext4Journal => "ext4-journal",
            RamdiskKind::Ext4Nodelalloc => "ext4-nodelalloc",
            RamdiskKind::Xfs => "xfs",
            RamdiskKind::XfsAg464 => "xfs-ag464",
            RamdiskKind::Btrfs => "btrfs",
            RamdiskKind::F2fs => "f2fs",
            RamdiskKind::Nilfs2 => "nilfs2",
        }
    }

    /// Parses a kind name.
    pub fn parse(name: &str) -> Option<RamdiskKind> {
        RamdiskKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The kernel's file-system type.
    pub fn fstype(self) -> &'static str {
        match self {
            RamdiskKind::Ext2 => "ext2",
            RamdiskKind::Ext3 => "ext3",
            RamdiskKind::Ext4 | RamdiskKind::Ext4Journal | RamdiskKind::Ext4Nodelalloc => "ext4",
            RamdiskKind::Xfs | RamdiskKind::XfsAg464 => "xfs",
            RamdiskKind::Btrfs => "btrfs",
            RamdiskKind::F2fs => "f2fs",
            RamdiskKind::Nilfs2 => "nilfs2",
        }
    }

    /// The mkfs program and its arguments (the image path follows). The ext family initializes
    /// inode tables and journal now, so no background initialization runs during timing.
    fn mkfs(self) -> (&'static str, &'static [&'static str]) {
        const EXT_EAGER: &[&str] = &["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"];
        match self {
            RamdiskKind::Ext2 => ("mkfs.ext2", &["-F", "-q", "-E", "lazy_itable_init=0"]),
            RamdiskKind::Ext3 => ("mkfs.ext3", EXT_EAGER),
            RamdiskKind::Ext4 | RamdiskKind::Ext4Journal | RamdiskKind::Ext4Nodelalloc => {
                ("mkfs.ext4", EXT_EAGER)
            }
            RamdiskKind::Xfs => ("mkfs.xfs", &["-f", "-q"]),
            RamdiskKind::XfsAg464 => ("mkfs.xfs", &["-f", "-q", "-d", "agcount=464"]),
            RamdiskKind::Btrfs => ("mkfs.btrfs", &["-f", "-q"]),
            RamdiskKind::F2fs => ("mkfs.f2fs", &["-f", "-q"]),
            RamdiskKind::Nilfs2 => ("mkfs.nilfs2", &["-f", "-q"]),
        }
    }

    /// The smallest backing file this kind formats on. xfs puts its log (at least 64 MiB in
    /// current xfsprogs) inside one allocation group, so 464 groups need about 32 GiB; the file is
    /// sparse, so only what mkfs and the workload write takes memory.
    pub fn min_bytes(self) -> u64 {
        match self {
            RamdiskKind::XfsAg464 => 40 << 30,
            _ => 0,
        }
    }

    /// Mount options besides `loop`.
    fn mount_options(self) -> &'static str {
        match self {
            RamdiskKind::Ext4Journal => ",data=journal",
            RamdiskKind::Ext4Nodelalloc => ",nodelalloc",
            _ => "",
        }
    }

    /// Why this kind cannot run here, or `None` when it can.
    pub fn unavailable(self) -> Option<String> {
        // The kernel first: without it, installing the tools would not help.
        if !kernel_has(self.fstype()) {
            return Some(format!(
                "this kernel ({}) has no {} file system",
                kernel_release(),
                self.fstype()
            ));
        }
        let (program, _) = self.mkfs();
        if find_program(program).is_none() {
            return Some(format!("{program} is not installed"));
        }
        None
    }
}

/// Finds `program` on PATH or in the sbin directories (root's PATH may lack them in containers).
fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The running kernel's release, for messages.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Why DAX file systems (ext4 or xfs mounted `-o dax` on a persistent-memory block device) cannot
/// run here, or `None` when a `/dev/pmem*` device exists. The harness does not format such a
/// device itself: it holds real data on machines that have one.
pub fn dax_unavailable() -> Option<String> {
    let has_pmem = std::fs::read_dir("/dev").is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("pmem"))
    });
    if has_pmem {
        None
    } else {
        Some("no persistent-memory block device (/dev/pmem*) on this machine".into())
    }
}

/// Whether the kernel knows `fstype`, loading its module if needed.
fn kernel_has(fstype: &str) -> bool {
    let listed = || {
        std::fs::read_to_string("/proc/filesystems")
            .map(|s| {
                s.lines()
                    .any(|l| l.split_whitespace().last() == Some(fstype))
            })
            .unwrap_or(false)
    };
    if listed() {
        return true;
    }
    let _ = Command::new("modprobe")
        .args(["-q", fstype])
        .stderr(std::process::Stdio::null())
        .status();
    listed()
}

/// A mounted scratch file system, torn down on drop.
#[derive(Debug)]
pub struct ScratchMount {
    mount_point: PathBuf,
    backing: Option<PathBuf>,
    // The FUSE session serving a noseFS mount; unmounting ends it and commits the image.
    session: Option<fuser::BackgroundSession>,
    // The daemon transport serving shim clients on the same mount (`nosefs-client`).
    server: Option<nosefs_daemon::server::Server>,
    // Dropped after the explicit teardown in `drop`, newest registration first.
    _unmount: Option<Registered>,
    _backing: Option<Registered>,
}

/// A directory of this run in the kernel's temporary directory, named by `label`.
pub(crate) fn scratch_dir(label: &str) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("nosefs-bench-{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn run_command(cmd: &mut Command) -> Result<(), String> {
    let output = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        // The first line says what went wrong; usage texts that follow it only clutter a report.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!("{cmd:?} failed: {}", first.trim()))
    }
}

impl ScratchMount {
    /// Mounts a private tmpfs of up to `size_bytes`.
    pub fn tmpfs(size_bytes: u64) -> Result<ScratchMount, String> {
        let dir = scratch_dir("tmpfs").map_err(|e| format!("cannot create mount point: {e}"))?;
        let mounted = run_command(Command::new("mount").args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size_bytes}"),
            "nosefs-bench",
            &dir.to_string_lossy(),
        ]));
        if let Err(e) = mounted {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("cannot mount a private tmpfs (needs root): {e}"));
        }
        Ok(ScratchMount {
            _unmount: Some(cleanup::register(Undo::Unmount(dir.clone()))),
            mount_point: dir,
            backing: None,
            session: None,
            server: None,
            _backing: None,
        })
    }

    /// Creates a sparse file of `size_bytes` in `backing_dir`, formats it as `kind` and mounts it
    /// through a loop device.
    pub fn ramdisk(
        kind: RamdiskKind,
        backing_dir: &Path,
        size_bytes: u64,
    ) -> Result<ScratchMount, String> {
        if let Some(why) = kind.unavailable() {
            return Err(why);
        }
        let label = format!("ramdisk-{}", kind.name());
        let image = backing_dir.join(format!("nosefs-bench-{}-{label}.img", std::process::id()));
        let backing_guard = cleanup::register(Undo::RemoveFile(image.clone()));
        let size_bytes = size_bytes.max(kind.min_bytes());
        let (program, args) = kind.mkfs();
        let program = find_program(program).expect("checked by unavailable()");
        let formatted = std::fs::File::create(&image)
            .and_then(|f| f.set_len(size_bytes))
            .map_err(|e| format!("cannot create {}: {e}", image.display()))
            .and_then(|()| run_command(Command::new(program).args(args).arg(&image)));
        if let Err(e) = formatted {
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        let dir = match scratch_dir(&label) {
            Ok(dir) => dir,
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                return Err(format!("cannot create mount point: {e}"));
            }
        };
        let mounted = run_command(Command::new("mount").args([
            "-t",
            kind.fstype(),
            "-o",
            &format!("loop{}", kind.mount_options()),
            &image.to_string_lossy(),
            &dir.to_string_lossy(),
        ]));
        if let Err(e) = mounted {
            let _ = std::fs::remove_dir(&dir);
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        Ok(ScratchMount {
            _unmount: Some(cleanup::register(Undo::Unmount(dir.clone()))),
            mount_point: dir,
            backing: Some(image),
            session: None,
            server: None,
            _backing: Some(backing_guard),
        })
    }

    /// Formats a sparse noseFS image of `size_bytes` in `backing_dir` and serves it through FUSE
    /// with `threads` worker threads (as `nosefs mount -o threads=N` does), and to shim clients
    /// over shared memory with `serve_clients` (as `nosefs mount` does).
    pub fn nosefs_fuse(
        backing_dir: &Path,
        size_bytes: u64,
        threads: usize,
        serve_clients: bool,
    ) -> Result<ScratchMount, String> {
        use fuser::{Config, MountOption};
        use nosefs_core::fs::{Fs, MountOptions};
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse does not exist (no FUSE in this kernel or container)".into());
        }
        // The FUSE target and the client target may both be in one run: one image each.
        let role = if serve_clients { "client" } else { "fuse" };
        let image = backing_dir.join(format!("nosefs-bench-{}-{role}.img", std::process::id()));
        let backing_guard = cleanup::register(Undo::RemoveFile(image.clone()));
        let params = nosefs_core::format::layout::MkfsParams {
            image_bytes: size_bytes,
            ..Default::default()
        };
        let mounted = nosefs_core::mkfs::mkfs(&image, &params)
            .and_then(|_geometry| Fs::mount(&image, &MountOptions::default()))
            .map_err(|e| format!("cannot format and mount {}: {e}", image.display()))
            .and_then(|fs| {
                let dir =
                    scratch_dir(role).map_err(|e| format!("cannot create mount point: {e}"))?;
                Ok((fs, dir))
            });
        let (fs, dir) = match mounted {
            Ok(mounted) => mounted,
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                return Err(e);
            }
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(image.display().to_string()),
            MountOption::Subtype("nosefs".into()),
            MountOption::DefaultPermissions,
        ];
        config.n_threads = Some(threads.max(1));
        // Other users may use it, as on the scratch tmpfs and ramdisks (PostgreSQL runs as its
        // own user); the kernel still checks every permission.
        config.acl = fuser::SessionACL::All;
        let unmount_guard = cleanup::register(Undo::Unmount(dir.clone()));
        let fs = std::sync::Arc::new(fs);
        let frontend = nosefs_fuse::NoseFuse::shared(fs.clone());
        let kernel_view = frontend.kernel_view();
        let notifier_slot = frontend.notifier_slot();
        match fuser::spawn_mount(frontend, &dir, &config) {
            Ok(session) => {
                let _ = notifier_slot.set(session.notifier());
                let server = if serve_clients {
                    let options = nosefs_daemon::server::Options {
                        allow_other: true,
                        invalidate: Some(Box::new(nosefs_fuse::Invalidator::new(
                            session.notifier(),
                            kernel_view,
                        ))),
                        stats: false,
                        direct_reads: true,
                    };
                    Some(
                        nosefs_daemon::server::Server::start(fs, &dir, options)
                            .map_err(|e| format!("cannot serve shim clients: {e}"))?,
                    )
                } else {
                    None
                };
                Ok(ScratchMount {
                    _unmount: Some(unmount_guard),
                    mount_point: dir,
                    backing: Some(image),
                    session: Some(session),
                    server,
                    _backing: Some(backing_guard),
                })
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                let _ = std::fs::remove_file(&image);
                Err(format!(
                    "cannot mount through FUSE (needs root or fusermount3): {e}"
                ))
            }
        }
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        &self.mount_point
    }

    /// Gives the backing file's memory back for blocks the file system no longer uses (`fstrim`,
    /// which the loop device turns into holes in the file). The suite calls it between runs,
    /// untimed: ramdisks do not discard on delete, so without it every kind would keep the
    /// largest fileset it ever held in memory, and a matrix of ten kinds would not fit in RAM.
    /// Nothing to do for tmpfs and FUSE mounts.
    pub fn trim(&self) -> Result<(), String> {
        if self.session.is_some() || self.backing.is_none() {
            return Ok(());
        }
        let program = find_program("fstrim").ok_or("fstrim is not installed")?;
        run_command(Command::new(program).arg(&self.mount_point))
    }

    /// The file behind the loop device, for a ramdisk.
    pub fn backing_file(&self) -> Option<&Path> {
        self.backing.as_deref()
    }
}

impl Drop for ScratchMount {
    fn drop(&mut self) {
        let undo = Undo::Unmount(self.mount_point.clone());
        // Clients first, so the FUSE session's end finds the image its own and unmounts it.
        drop(self.server.take());
        match self.session.take() {
            Some(session) => {
                if let Err(e) = session.umount_and_join() {
                    eprintln!("nosefs bench: unmounting the FUSE mount failed: {e}");
                    let _ = cleanup::run(&undo);
                }
                let _ = std::fs::remove_dir(&self.mount_point);
            }
            None => {
                if let Err(e) = cleanup::run(&undo) {
                    eprintln!("nosefs bench: {e}");
                }
            }
        }
        if let Some(image) = &self.backing {
            let _ = std::fs::remove_file(image);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for kind in RamdiskKind::ALL {
            assert_eq!(RamdiskKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(RamdiskKind::parse("f2fs"), Some(RamdiskKind::F2fs));
        assert_eq!(RamdiskKind::parse("zfs"), None);
    }
}
