//! What a benchmark runs against: the native library in-process, or any directory through system
//! calls (a mounted noseFS, tmpfs, a ramdisk file system).
//!
//! [`Target`] is the handful of handle-based calls the workloads make. Workloads are generic over
//! it, so the timed loop pays no dynamic dispatch, and they see only handles and prepared names:
//! nothing is allocated or looked up by path inside a timed region.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::cleanup::{self, Registered, Undo};
use crate::scratch::RamdiskKind;
use crate::sys;
use nosefs_core::file::mmap::Mapping;
use nosefs_core::format::layout::{Geometry, MkfsParams};
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::image::Image;
use nosefs_core::namespace::{Owner, RenameFlags, ROOT_INO};
use nosefs_core::pmem::{counters, Counters, Region};

/// A target as named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// `nosefs`, `nosefs-sync`, `nosefs:PATH`, `nosefs-sync:PATH`: the native library on a fresh
    /// image per run, in /dev/shm, in directory PATH, or on device-dax device PATH.
    /// `nosefs-msync-whole` is the ablation of atomic mmap's dirty tracking: every msync writes
    /// back the whole mapped file, as NOVA does (seed 001, Table I).
    Native {
        /// Where the image goes (`None`: the harness's image directory).
        place: Option<PathBuf>,
        /// How the image is mounted.
        mode: NativeMode,
    },
    /// `dir:PATH`: any mounted file system, through system calls.
    Dir(PathBuf),
    /// `nosefs-fuse`: a fresh noseFS image served through the FUSE frontend by the harness.
    Fuse,
    /// `tmpfs`: a private tmpfs the harness mounts.
    Tmpfs,
    /// `ramdisk:KIND`: a loop device over a file in /dev/shm, formatted and mounted by the harness.
    Ramdisk(RamdiskKind),
    /// `nosefs-floor`: the native library's persistence work alone, recorded and replayed
    /// ([`crate::floor`]).
    Floor,
    /// `nosefs-preload`: a fresh image served by the preload shim inside a worker process that
    /// makes the same libc calls as the `dir:` targets ([`crate::preload`]).
    Preload,
    /// `nosefs-client`: the same worker under the shim in daemon mode, served over shared memory
    /// by a daemon that also serves the image's FUSE mount (as `nosefs mount` does).
    Client,
}

impl TargetSpec {
    /// Parses a target name.
    pub fn parse(text: &str) -> Result<TargetSpec, String> {
        let (head, arg) = match text.split_once(':') {
            Some((head, arg)) => (head, Some(arg)),
            None => (text, None),
        };
        match (head, arg) {
            ("nosefs" | "nosefs-sync" | "nosefs-msync-whole" | "nosefs-compactor", place) => Ok(TargetSpec::Native {
                place: place.map(PathBuf::from),
                mode: match head {
                    "nosefs-sync" => NativeMode::Sync,
                    "nosefs-msync-whole" => NativeMode::MsyncWhole,
                    "nosefs-compactor" => NativeMode::Compactor,
                    _ => NativeMode::Plain,
                },
            }),
            ("tmpfs", None) => Ok(TargetSpec::Tmpfs),
            ("nosefs-fuse", None) => Ok(TargetSpec::Fuse),
            ("nosefs-floor", None) => Ok(TargetSpec::Floor),
            ("nosefs-preload", None) => Ok(TargetSpec::Preload),
            ("nosefs-client", None) => Ok(TargetSpec::Client),
            ("dir", Some(path)) if !path.is_empty() => Ok(TargetSpec::Dir(path.into())),
            ("ramdisk", Some(kind)) => RamdiskKind::parse(kind).map(TargetSpec::Ramdisk).ok_or_else(|| {
                let kinds: Vec<&str> = RamdiskKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown ramdisk kind `{kind}` (one of {})", kinds.join(", "))
            }),
            _ => Err(format!(
                "unknown target `{text}` (nosefs, nosefs-sync, nosefs-msync-whole, nosefs-compactor, nosefs:PATH, nosefs-fuse, nosefs-floor, nosefs-preload, nosefs-client, dir:PATH, tmpfs, ramdisk:KIND)"
            )),
        }
    }

    /// The name in reports (the text it was parsed from, normalized).
    pub fn label(&self) -> String {
        match self {
            TargetSpec::Native { place, mode } => {
                let head = match mode {
                    NativeMode::Plain => "nosefs",
                    NativeMode::Sync => "nosefs-sync",
                    NativeMode::MsyncWhole => "nosefs-msync-whole",
                    NativeMode::Compactor => "nosefs-compactor",
                };
                match place {
                    Some(p) => format!("{head}:{}", p.display()),
                    None => head.into(),
                }
            }
            TargetSpec::Dir(path) => format!("dir:{}", path.display()),
            TargetSpec::Fuse => "nosefs-fuse".into(),
            TargetSpec::Floor => "nosefs-floor".into(),
            TargetSpec::Preload => "nosefs-preload".into(),
            TargetSpec::Client => "nosefs-client".into(),
            TargetSpec::Tmpfs => "tmpfs".into(),
            TargetSpec::Ramdisk(kind) => format!("ramdisk:{}", kind.name()),
        }
    }
}

/// How a native target's image is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NativeMode {
    /// As a program would mount it.
    #[default]
    Plain,
    /// With the `sync` option (every write durable on return).
    Sync,
    /// The ablation: every msync writes back the whole mapped file.
    MsyncWhole,
    /// With the background compactor (`nosefs mount -o compactor`): fragmented windows are
    /// copied by its thread and taken along by the file's next commit.
    Compactor,
}

impl NativeMode {
    fn mount_options(self) -> MountOptions {
        MountOptions {
            populate: true,
            sync: self == NativeMode::Sync,
            msync_whole_file: self == NativeMode::MsyncWhole,
            ..MountOptions::default()
        }
    }
}

/// The calls a workload makes. Handles (`Dir`, `File`, `Map`) are the target's own; names are
/// prepared C strings.
pub trait Target: Sync {
    /// An open directory.
    type Dir: Send + Sync;
    /// An open file.
    type File: Send + Sync;
    /// A file mapped into memory.
    type Map: Send + Sync;

    /// The run's (empty, fresh) directory.
    fn root(&self) -> &Self::Dir;
    /// Creates directory `name` in `parent` and opens it.
    fn mkdir(&self, parent: &Self::Dir, name: &CStr) -> io::Result<Self::Dir>;
    /// Creates file `name` (exclusively) and closes it again.
    fn create(&self, dir: &Self::Dir, name: &CStr) -> io::Result<()>;
    /// Renames `from/old` to `to/new`.
    fn rename(&self, from: &Self::Dir, old: &CStr, to: &Self::Dir, new: &CStr) -> io::Result<()>;
    /// Removes file `name`.
    fn unlink(&self, dir: &Self::Dir, name: &CStr) -> io::Result<()>;
    /// The size of file `name` (stat).
    fn stat(&self, dir: &Self::Dir, name: &CStr) -> io::Result<u64>;
    /// Opens file `name` for reading and writing, creating it if `create`.
    fn open(&self, dir: &Self::Dir, name: &CStr, create: bool) -> io::Result<Self::File>;
    /// Writes all of `data` at `offset`.
    fn pwrite(&self, file: &Self::File, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn pread(&self, file: &Self::File, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Makes the file's data and metadata durable.
    fn fsync(&self, file: &Self::File) -> io::Result<()>;
    /// Closes the file.
    fn close(&self, file: Self::File) -> io::Result<()>;
    /// The file's current offset (`lseek(fd, 0, SEEK_CUR)`): a call that does no work, for
    /// the cost of making a call at all. Targets without descriptors do not have it.
    fn seek_current(&self, _file: &Self::File) -> io::Result<u64> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no descriptors: the call cost is measured on descriptor-based targets",
        ))
    }
    /// The size of an open file (fstat). Targets without descriptors answer through their
    /// handle.
    fn fstat(&self, _file: &Self::File) -> io::Result<u64> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this target does not answer fstat",
        ))
    }
    /// Creates file `name` of `len` bytes and maps `map_len` bytes of it shared (`map_len` at
    /// least `len`: a mapping larger than its file, as LMDB maps its whole map size).
    fn map(&self, dir: &Self::Dir, name: &CStr, len: u64, map_len: u64) -> io::Result<Self::Map>;
    /// Stores `data` into the mapping at `offset`.
    fn map_write(&self, map: &Self::Map, offset: u64, data: &[u8]);
    /// `msync` of `[offset, offset + len)`: makes those bytes durable.
    fn msync(&self, map: &Self::Map, offset: u64, len: u64) -> io::Result<()>;
    /// This thread's flush and fence counters, where the target counts them.
    fn counters(&self) -> Option<Counters> {
        None
    }
}

/// Names `{prefix}{thread:03}-{i:08}`, generated before timing: every name of a set has the same
/// length, and sets of different prefixes or threads are disjoint.
pub fn names(prefix: &str, thread: usize, n: usize) -> Vec<CString> {
    (0..n)
        .map(|i| CString::new(format!("{prefix}{thread:03}-{i:08}")).expect("no NUL in a name"))
        .collect()
}

/// A name as a C string (for setup code outside timed regions).
pub fn cname(name: &str) -> CString {
    CString::new(name).expect("no NUL in a name")
}

/// What a native image must hold for one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// Names (files and directories) alive at once.
    pub names: u64,
    /// File data bytes alive at once.
    pub data_bytes: u64,
}

fn errno(e: nosefs_core::Error) -> io::Error {
    match e {
        nosefs_core::Error::Errno(errno) => io::Error::from_raw_os_error(errno.0),
        other => io::Error::other(other.to_string()),
    }
}

/// A fresh, mounted native image: formatted pre-faulted and mounted with its pages populated, so
/// that no page fault lands in a timed region (seed 002); unmounted and removed on drop (or on
/// interrupt).
#[derive(Debug)]
pub struct BenchImage {
    fs: Option<std::sync::Arc<Fs>>,
    /// The image file to remove on drop (`None`: a device, or a recording image in memory).
    remove: Option<PathBuf>,
    _registered: Option<Registered>,
}

impl BenchImage {
    /// Formats `path` with `params` (pre-faulted) and mounts it. A regular file is removed on
    /// drop; a device is left formatted.
    pub fn create(
        path: PathBuf,
        params: &MkfsParams,
        mode: NativeMode,
    ) -> nosefs_core::Result<Self> {
        let params = MkfsParams {
            prefault: true,
            ..params.clone()
        };
        let is_device = std::fs::metadata(&path).is_ok_and(|m| !m.is_file());
        let registered = (!is_device).then(|| cleanup::register(Undo::RemoveFile(path.clone())));
        nosefs_core::mkfs::mkfs(&path, &params)?;
        let fs = std::sync::Arc::new(Fs::mount(&path, &mode.mount_options())?);
        if mode == NativeMode::Compactor {
            Fs::start_compactor(&fs).map_err(|e| nosefs_core::Error::io("compactor thread", e))?;
        }
        Ok(BenchImage {
            fs: Some(fs),
            remove: (!is_device).then_some(path),
            _registered: registered,
        })
    }

    /// Formats an in-memory *recording* image with `params` and mounts it: every store, flush
    /// and fence is logged ([`nosefs_core::pmem::Recorder`]).
    pub fn recording(params: &MkfsParams) -> nosefs_core::Result<Self> {
        let geometry = Geometry::for_mkfs(params)?;
        let region = Region::recording(params.image_bytes)?;
        nosefs_core::mkfs::format_region(&region, &geometry, (0, 0))?;
        let fs = Fs::mount_image(Image::from_region(region)?, &MountOptions::default())?;
        Ok(BenchImage {
            fs: Some(std::sync::Arc::new(fs)),
            remove: None,
            _registered: None,
        })
    }

    /// The mounted file system.
    pub fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted until drop")
    }
}

impl Drop for BenchImage {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            fs.stop_compactor();
            match std::sync::Arc::try_unwrap(fs) {
                Ok(fs) => drop(fs.unmount()),
                Err(shared) => drop(shared.sync_all()),
            }
        }
        if let Some(path) = &self.remove {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Image parameters for a run that keeps `needs` alive, with room to spare.
pub fn params_for(needs: Needs) -> MkfsParams {
    let pinodes = needs.names + 4096;
    let data = needs.data_bytes + needs.data_bytes / 4 + (32 << 20);
    let image_bytes = (data + pinodes * 128 * 3 + (32 << 20)).next_multiple_of(1 << 20);
    MkfsParams {
        image_bytes,
        pinodes: Some(pinodes),
        extents: Some((data / 4096).max(1 << 16)),
        ..MkfsParams::default()
    }
}

/// The native library on a fresh image.
#[derive(Debug)]
pub struct Native {
    image: BenchImage,
    root: u64,
}

impl Native {
    /// Formats an image sized for `needs` at `place` (a directory for an image file, or a
    /// device-dax device) and mounts it.
    pub fn new(place: &Path, needs: Needs, mode: NativeMode) -> nosefs_core::Result<Native> {
        let is_dir = place.is_dir();
        let path = if is_dir {
            place.join(format!("nosefs-bench-{}.img", std::process::id()))
        } else {
            place.to_path_buf()
        };
        let params = params_for(needs);
        let image = BenchImage::create(path, &params, mode)?;
        Ok(Native {
            image,
            root: ROOT_INO,
        })
    }

    /// The native library on an in-memory recording image sized for `needs` (for
    /// [`crate::floor`]).
    pub fn recording(needs: Needs) -> nosefs_core::Result<Native> {
        Ok(Native {
            image: BenchImage::recording(&params_for(needs))?,
            root: ROOT_INO,
        })
    }

    fn fs(&self) -> &Fs {
        self.image.fs()
    }

    /// The image's region.
    pub fn region(&self) -> &Region {
        self.fs().image().region()
    }

    /// Pieces (extents and pending writes) of a file: its fragmentation.
    pub fn pieces(&self, file: &u64) -> usize {
        self.fs().file_pieces(*file).expect("the file exists")
    }
}

impl Target for Native {
    type Dir = u64;
    type File = u64;
    type Map = Mapping;

    fn root(&self) -> &u64 {
        &self.root
    }
    fn mkdir(&self, parent: &u64, name: &CStr) -> io::Result<u64> {
        let attr = self
            .fs()
            .mkdir(*parent, name.to_bytes(), 0o755, Owner::default());
        Ok(attr.map_err(errno)?.ino)
    }
    fn create(&self, dir: &u64, name: &CStr) -> io::Result<()> {
        let fs = self.fs();
        let ino = fs
            .create(*dir, name.to_bytes(), 0o644, Owner::default(), true)
            .map_err(errno)?
            .ino;
        fs.open(ino).and_then(|()| fs.close(ino)).map_err(errno)
    }
    fn rename(&self, from: &u64, old: &CStr, to: &u64, new: &CStr) -> io::Result<()> {
        let flags = RenameFlags::default();
        let (old, new) = (old.to_bytes(), new.to_bytes());
        self.fs().rename(*from, old, *to, new, flags).map_err(errno)
    }
    fn unlink(&self, dir: &u64, name: &CStr) -> io::Result<()> {
        self.fs().unlink(*dir, name.to_bytes()).map_err(errno)
    }
    fn stat(&self, dir: &u64, name: &CStr) -> io::Result<u64> {
        Ok(self.fs().lookup(*dir, name.to_bytes()).map_err(errno)?.size)
    }
    fn fstat(&self, file: &u64) -> io::Result<u64> {
        Ok(self.fs().getattr(*file).map_err(errno)?.size)
    }
    fn open(&self, dir: &u64, name: &CStr, create: bool) -> io::Result<u64> {
        let fs = self.fs();
        let ino = if create {
            fs.create(*dir, name.to_bytes(), 0o644, Owner::default(), false)
        } else {
            fs.lookup(*dir, name.to_bytes())
        }
        .map_err(errno)?
        .ino;
        fs.open(ino).map_err(errno)?;
        Ok(ino)
    }
    fn pwrite(&self, file: &u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.fs().write(*file, offset, data).map_err(errno)?;
        Ok(())
    }
    fn pread(&self, file: &u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let got = self.fs().read(*file, offset, buf).map_err(errno)?;
        if got == buf.len() {
            Ok(())
        } else {
            Err(io::ErrorKind::UnexpectedEof.into())
        }
    }
    fn fsync(&self, file: &u64) -> io::Result<()> {
        self.fs().fsync(*file).map_err(errno)
    }
    fn close(&self, file: u64) -> io::Result<()> {
        self.fs().close(file).map_err(errno)
    }
    fn map(&self, dir: &u64, name: &CStr, len: u64, map_len: u64) -> io::Result<Mapping> {
        let fs = self.fs();
        let ino = fs
            .create(*dir, name.to_bytes(), 0o644, Owner::default(), false)
            .map_err(errno)?
            .ino;
        fs.truncate(ino, len).map_err(errno)?;
        let map_len = usize::try_from(map_len.max(len)).map_err(|_| io::ErrorKind::InvalidInput)?;
        fs.map(ino, 0, map_len, true).map_err(errno)
    }
    fn map_write(&self, map: &Mapping, offset: u64, data: &[u8]) {
        map.store(offset as usize, data);
    }
    fn msync(&self, map: &Mapping, offset: u64, len: u64) -> io::Result<()> {
        self.fs()
            .msync_range(map, offset as usize, len as usize)
            .map_err(errno)
    }
    fn counters(&self) -> Option<Counters> {
        Some(counters())
    }
}

/// An open directory of a [`Syscalls`] target.
#[derive(Debug)]
pub struct SysDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Any directory through system calls (`openat`, `renameat`, `unlinkat`, `pwrite`, ... on
/// descriptors), working in a fresh directory removed on drop.
#[derive(Debug)]
pub struct Syscalls {
    root: SysDir,
    _registered: Registered,
}

impl Syscalls {
    /// Creates a fresh directory inside `parent` for one run.
    pub fn new(parent: &Path) -> io::Result<Syscalls> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static RUN: AtomicU64 = AtomicU64::new(0);
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("nosefs-bench-{}-{run}", std::process::id()));
        let registered = cleanup::register(Undo::RemoveTree(path.clone()));
        std::fs::create_dir(&path)?;
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
        let fd = sys::openat(None, &cpath, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
        Ok(Syscalls {
            root: SysDir { fd, path },
            _registered: registered,
        })
    }
}

impl Drop for Syscalls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root.path);
    }
}

impl Target for Syscalls {
    type Dir = SysDir;
    type File = File;
    type Map = sys::Mapped;

    fn root(&self) -> &SysDir {
        &self.root
    }
    fn mkdir(&self, parent: &SysDir, name: &CStr) -> io::Result<SysDir> {
        sys::mkdirat(parent.fd.as_fd(), name, 0o755)?;
        let flags = libc::O_DIRECTORY | libc::O_RDONLY;
        let fd = sys::openat(Some(parent.fd.as_fd()), name, flags, 0)?;
        let path = parent.path.join(name.to_string_lossy().as_ref());
        Ok(SysDir { fd, path })
    }
    fn create(&self, dir: &SysDir, name: &CStr) -> io::Result<()> {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
        drop(sys::openat(Some(dir.fd.as_fd()), name, flags, 0o644)?);
        Ok(())
    }
    fn rename(&self, from: &SysDir, old: &CStr, to: &SysDir, new: &CStr) -> io::Result<()> {
        sys::renameat(from.fd.as_fd(), old, to.fd.as_fd(), new)
    }
    fn unlink(&self, dir: &SysDir, name: &CStr) -> io::Result<()> {
        sys::unlinkat(dir.fd.as_fd(), name)
    }
    fn stat(&self, dir: &SysDir, name: &CStr) -> io::Result<u64> {
        sys::size_at(dir.fd.as_fd(), name)
    }
    fn open(&self, dir: &SysDir, name: &CStr, create: bool) -> io::Result<File> {
        let mut flags = libc::O_RDWR;
        if create {
            flags |= libc::O_CREAT;
        }
        let fd = sys::openat(Some(dir.fd.as_fd()), name, flags, 0o644)?;
        Ok(File::from(fd))
    }
    fn seek_current(&self, file: &File) -> io::Result<u64> {
        sys::seek_current(file.as_fd())
    }
    fn fstat(&self, file: &File) -> io::Result<u64> {
        sys::size_of(file.as_fd())
    }
    fn pwrite(&self, file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        file.write_all_at(data, offset)
    }
    fn pread(&self, file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        file.read_exact_at(buf, offset)
    }
    fn fsync(&self, file: &File) -> io::Result<()> {
        file.sync_all()
    }
    fn close(&self, file: File) -> io::Result<()> {
        drop(file);
        Ok(())
    }
    fn map(&self, dir: &SysDir, name: &CStr, len: u64, map_len: u64) -> io::Result<sys::Mapped> {
        // Through libc's open and mmap, which the preload shim serves for noseFS files.
        let file = self.open(dir, name, true)?;
        file.set_len(len)?;
        let to_usize = |n: u64| usize::try_from(n).map_err(|_| io::ErrorKind::InvalidInput);
        sys::Mapped::map(file.as_fd(), to_usize(len)?, to_usize(map_len.max(len))?)
    }
    fn map_write(&self, map: &sys::Mapped, offset: u64, data: &[u8]) {
        map.write(offset as usize, data);
    }
    fn msync(&self, map: &sys::Mapped, offset: u64, len: u64) -> io::Result<()> {
        map.msync(offset as usize, len as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_parse_and_print_back() {
        for text in [
            "nosefs",
            "nosefs-sync",
            "nosefs-msync-whole",
            "nosefs-compactor",
            "nosefs:/mnt/pmem0",
            "dir:/mnt/nosefs",
            "nosefs-fuse",
            "nosefs-preload",
            "tmpfs",
            "ramdisk:ext4",
            "ramdisk:xfs-ag464",
        ] {
            assert_eq!(TargetSpec::parse(text).unwrap().label(), text);
        }
        for bad in [
            "ramdisk:zfs",
            "dir:",
            "tmpfs:x",
            "nosefs-fuse:x",
            "ext4",
            "",
        ] {
            assert!(TargetSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn name_sets_are_unique_equal_length_and_disjoint() {
        let a = names("f", 0, 2000);
        let b = names("f", 1, 2000);
        let c = names("r", 0, 2000);
        let all: std::collections::HashSet<&CString> = a.iter().chain(&b).chain(&c).collect();
        assert_eq!(all.len(), 6000, "a name repeats within or across sets");
        let len = a[0].as_bytes().len();
        assert!(all.iter().all(|n| n.as_bytes().len() == len));
        assert!(len <= 255);
    }
}
