//! What a benchmark runs against: the native library, or any directory through system calls.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::namespace::{Fs, MountOptions, Owner, RenameFlags, ROOT_INO};
use nosefs_core::pmem::{counters, Counters};
use rustix::fs::{AtFlags, Mode, OFlags};

/// A target for directory operations on files numbered 0..n in one directory.
pub trait DirTarget {
    /// Name in reports.
    fn name(&self) -> String;
    /// Creates (and closes) file `i`.
    fn create(&self, i: usize);
    /// Renames file `i` to its second name.
    fn rename(&self, i: usize);
    /// Unlinks file `i` by its second name.
    fn unlink(&self, i: usize);
    /// This thread's persistence counters, where the target reports them.
    fn counters(&self) -> Option<Counters> {
        None
    }
}

/// Names `f00000000`.. and `r00000000`.., generated before timing.
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:08}")).collect()
}

/// A fresh, mounted image for a native target: formatted pre-faulted and mounted with its pages
/// populated, so that no page fault lands in a timed region (seed 002); unmounted and removed on
/// drop.
#[derive(Debug)]
pub struct BenchImage {
    fs: Option<Fs>,
    path: PathBuf,
}

impl BenchImage {
    /// Formats `path` with `params` (pre-faulted) and mounts it.
    pub fn create(path: PathBuf, params: &MkfsParams) -> nosefs_core::Result<BenchImage> {
        let params = MkfsParams {
            prefault: true,
            ..params.clone()
        };
        nosefs_core::mkfs::mkfs(&path, &params)?;
        let options = MountOptions {
            populate: true,
            ..MountOptions::default()
        };
        let fs = Fs::mount(&path, &options)?;
        Ok(BenchImage { fs: Some(fs), path })
    }

    /// The mounted file system.
    pub fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted until drop")
    }
}

impl Drop for BenchImage {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            drop(fs.unmount());
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The native library on a fresh image in /dev/shm, removed on drop.
#[derive(Debug)]
pub struct Native {
    image: BenchImage,
    first: Vec<Vec<u8>>,
    second: Vec<Vec<u8>>,
}

impl Native {
    /// Formats an image with room for `n` files in `dir` (default /dev/shm) and mounts it.
    pub fn new(dir: &Path, n: usize) -> nosefs_core::Result<Native> {
        let path = dir.join(format!("nosefs-bench-{}.img", std::process::id()));
        let pinodes = 2 * n as u64 + 1024;
        let params = MkfsParams {
            image_bytes: (pinodes * 128 * 3 + (64 << 20)).next_multiple_of(1 << 20),
            pinodes: Some(pinodes),
            extents: Some(1024),
            ..MkfsParams::default()
        };
        let as_bytes = |v: Vec<String>| v.into_iter().map(String::into_bytes).collect();
        Ok(Native {
            image: BenchImage::create(path, &params)?,
            first: as_bytes(names("f", n)),
            second: as_bytes(names("r", n)),
        })
    }

    fn fs(&self) -> &Fs {
        self.image.fs()
    }
}

impl DirTarget for Native {
    fn name(&self) -> String {
        "nosefs".into()
    }
    fn create(&self, i: usize) {
        self.fs()
            .create(ROOT_INO, &self.first[i], 0o644, Owner::default(), true)
            .expect("create");
    }
    fn rename(&self, i: usize) {
        let flags = RenameFlags::default();
        self.fs()
            .rename(ROOT_INO, &self.first[i], ROOT_INO, &self.second[i], flags)
            .expect("rename");
    }
    fn unlink(&self, i: usize) {
        self.fs().unlink(ROOT_INO, &self.second[i]).expect("unlink");
    }
    fn counters(&self) -> Option<Counters> {
        Some(counters())
    }
}

/// Any directory through system calls (openat, renameat, unlinkat on a directory descriptor).
#[derive(Debug)]
pub struct Syscalls {
    label: String,
    dir: PathBuf,
    fd: OwnedFd,
    first: Vec<CString>,
    second: Vec<CString>,
}

impl Syscalls {
    /// A fresh, empty directory inside `parent`, removed on drop.
    pub fn new(label: &str, parent: &Path, n: usize) -> std::io::Result<Syscalls> {
        let dir = parent.join(format!("nosefs-bench-{}-{label}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let fd = rustix::fs::open(
            &dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let c = |v: Vec<String>| {
            v.into_iter()
                .map(|s| CString::new(s).expect("no NUL"))
                .collect()
        };
        Ok(Syscalls {
            label: label.into(),
            dir,
            fd,
            first: c(names("f", n)),
            second: c(names("r", n)),
        })
    }
}

impl Drop for Syscalls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl DirTarget for Syscalls {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn create(&self, i: usize) {
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(
            &self.fd,
            self.first[i].as_c_str(),
            flags,
            Mode::from_raw_mode(0o644),
        )
        .expect("create");
        drop(fd);
    }
    fn rename(&self, i: usize) {
        rustix::fs::renameat(
            &self.fd,
            self.first[i].as_c_str(),
            &self.fd,
            self.second[i].as_c_str(),
        )
        .expect("rename");
    }
    fn unlink(&self, i: usize) {
        rustix::fs::unlinkat(&self.fd, self.second[i].as_c_str(), AtFlags::empty())
            .expect("unlink");
    }
}
