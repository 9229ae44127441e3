//! Mapping an image into memory: regular files, DAX files, device-dax, and anonymous memory.
//!
//! Every system call here goes through rustix's raw Linux backend, never through libc: the
//! LD_PRELOAD shim links this code and exports libc's `open`, `mmap`, `flock`, `fstat`, ..., so a
//! libc call from here would land in the shim's own hooks.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};

use super::RegionOptions;
use crate::error::{Error, Result};

/// How a region may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Mapped shared and writable; the image is locked exclusively.
    #[default]
    ReadWrite,
    /// Mapped read-only; the image is locked shared (several readers, no writer).
    ReadOnly,
    /// Mapped private copy-on-write: stores change only this process's view, never the image.
    /// Locked shared. `fsck` uses it to replay journals without touching the image.
    PrivateCopy,
}

/// What backs a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappingKind {
    /// A regular file (a file in `/dev/shm`, or on a DAX or ordinary file system).
    File,
    /// A device-dax character device such as `/dev/dax0.0`.
    DevDax,
    /// Anonymous memory (the recording backend).
    Anonymous,
}

impl std::fmt::Display for MappingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MappingKind::File => "file",
            MappingKind::DevDax => "device-dax",
            MappingKind::Anonymous => "anonymous memory",
        })
    }
}

/// What was mapped and how.
#[derive(Debug, Clone)]
pub struct MapInfo {
    /// The image path, if any.
    pub path: Option<PathBuf>,
    /// What backs the mapping.
    pub kind: MappingKind,
    /// How the region may be used.
    pub access: Access,
    /// Whether the kernel accepted `MAP_SYNC` (the file is on a DAX file system).
    pub map_sync: bool,
    /// Whether every byte is known to read as zero (a freshly created or truncated file).
    pub zero_filled: bool,
}

#[derive(Debug)]
pub(super) struct Mapping {
    base: *mut u8,
    len: u64,
    info: MapInfo,
    // Held for the flock: closing the file releases the lock.
    _file: Option<OwnedFd>,
}

impl Mapping {
    pub(super) fn base(&self) -> *mut u8 {
        self.base
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    pub(super) fn info(&self) -> &MapInfo {
        &self.info
    }

    pub(super) fn descriptor(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        self._file.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// `msync(MS_SYNC)` over the pages covering `[offset, offset + len)`, which the caller has
    /// bounds-checked.
    pub(super) fn msync(&self, offset: u64, len: u64) -> std::io::Result<()> {
        const PAGE: u64 = 4096;
        let start = offset - offset % PAGE;
        let end = (offset + len).min(self.len);
        // SAFETY: `[start, end)` lies inside the mapping this struct owns (start is rounded down
        // to a page boundary inside it); msync only asks the kernel to write pages back.
        unsafe {
            rustix::mm::msync(
                self.base.add(start as usize).cast(),
                (end - start) as usize,
                MsyncFlags::SYNC,
            )
        }
        .map_err(std::io::Error::from)
    }

    pub(super) fn open(path: &Path, options: &RegionOptions) -> Result<Mapping> {
        if let Some(fd) = options.image_fd {
            return Mapping::open_descriptor(fd, path, options);
        }
        let access = if options.access == Access::ReadWrite {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        let mut file = rustix::fs::open(path, access | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| Error::io(format!("cannot open image {}", path.display()), e.into()))?;
        if let Some(floor) = options.fd_floor {
            file = rustix::io::fcntl_dupfd_cloexec(&file, floor).map_err(|e| {
                Error::io(
                    format!("cannot move the descriptor of {}", path.display()),
                    e.into(),
                )
            })?;
        }
        lock(&file, path, options.access)?;
        let (kind, len) = image_kind_and_size(&file, path)?;
        map_file(file, path, kind, len, options, false)
    }

    /// Maps the image through `fd`, an open descriptor of it that this process inherited (the
    /// preload shim's, for a process that dropped the privileges opening `path` needs). Its
    /// description is shared with other processes, whose `flock` would not conflict with this
    /// one's, so only the per-process record lock guards it (see [`lock`]).
    fn open_descriptor(fd: i32, path: &Path, options: &RegionOptions) -> Result<Mapping> {
        // SAFETY: the caller promises that `fd` is open for the duration of this call; it is
        // only duplicated here.
        let inherited = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let floor = options.fd_floor.unwrap_or(0);
        let file = rustix::io::fcntl_dupfd_cloexec(inherited, floor).map_err(|e| {
            Error::io(
                format!("cannot use the inherited descriptor of {}", path.display()),
                e.into(),
            )
        })?;
        record_lock(&file, path, options.access)?;
        let (kind, len) = image_kind_and_size(&file, path)?;
        map_file(file, path, kind, len, options, false)
    }

    pub(super) fn create(
        path: &Path,
        size_bytes: Option<u64>,
        options: &RegionOptions,
    ) -> Result<Mapping> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC;
        let file = rustix::fs::open(path, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| Error::io(format!("cannot create image {}", path.display()), e.into()))?;
        lock(&file, path, Access::ReadWrite)?;
        let (kind, current_len) = image_kind_and_size(&file, path)?;
        let (len, zero_filled) = match (kind, size_bytes) {
            (MappingKind::File, Some(size)) => {
                // Dropping every page first makes the whole file read as zero at no cost, so
                // mkfs needs to write only what it formats.
                let resize = rustix::fs::ftruncate(&file, 0)
                    .and_then(|()| rustix::fs::ftruncate(&file, size));
                resize
                    .map_err(|e| Error::io(format!("cannot size {}", path.display()), e.into()))?;
                (size, true)
            }
            (MappingKind::File, None) if current_len > 0 => (current_len, false),
            (MappingKind::File, None) => {
                return Err(Error::InvalidArgument(format!(
                    "{} is empty: give --size",
                    path.display()
                )))
            }
            (_, Some(size)) if size != current_len => {
                return Err(Error::InvalidArgument(format!(
                    "{} is a device of {current_len} bytes; --size {size} does not match",
                    path.display()
                )))
            }
            (_, _) => (current_len, false),
        };
        let options = RegionOptions {
            access: Access::ReadWrite,
            ..options.clone()
        };
        map_file(file, path, kind, len, &options, zero_filled)
    }

    /// Maps the whole image behind `file` read-only, taking no lock: a daemon client's view of
    /// the image its daemon serves, given to it by the daemon (`crate::file::direct`). The
    /// descriptor is closed once mapped (it may be a low number the program will want back).
    pub(super) fn view(file: OwnedFd) -> Result<Mapping> {
        let path = Path::new("(the daemon's image)");
        let (kind, len) = image_kind_and_size(&file, path)?;
        let options = RegionOptions {
            access: Access::ReadOnly,
            ..RegionOptions::default()
        };
        let mut mapping = map_file(file, path, kind, len, &options, false)?;
        mapping._file = None;
        Ok(mapping)
    }

    pub(super) fn anonymous(len: u64) -> Result<Mapping> {
        if len == 0 {
            return Err(Error::InvalidArgument("empty region".into()));
        }
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let base =
            unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len as usize, prot, flags) }
                .map_err(|e| Error::io(format!("cannot map {len} bytes of memory"), e.into()))?;
        Ok(Mapping {
            base: base.cast(),
            len,
            info: MapInfo {
                path: None,
                kind: MappingKind::Anonymous,
                access: Access::ReadWrite,
                map_sync: false,
                zero_filled: true,
            },
            _file: None,
        })
    }
}

impl Mapping {
    /// `madvise(MADV_POPULATE_WRITE)` over `[offset, offset + len)`, which the caller has
    /// bounds-checked: the pages made present and writable, as a store would, without storing.
    pub(super) fn populate_write(&self, offset: u64, len: u64) -> std::io::Result<()> {
        const PAGE: u64 = 4096;
        let start = offset - offset % PAGE;
        let end = (offset + len).min(self.len);
        if start >= end {
            return Ok(());
        }
        // SAFETY: `[start, end)` lies inside the mapping this struct owns; populating changes no
        // byte of it.
        unsafe {
            rustix::mm::madvise(
                self.base.add(start as usize).cast(),
                (end - start) as usize,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        }
        .map_err(std::io::Error::from)
    }
}

impl Mapping {
    /// `fallocate` over `[offset, offset + len)` of the image's file: its file system holds those
    /// pages from now on, or says it cannot (ENOSPC), where a store into a hole it cannot fill
    /// would kill the process with SIGBUS. `Ok` when the mapping has no file of its own.
    pub(super) fn reserve(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let Some(file) = self._file.as_ref() else {
            return Ok(());
        };
        let end = (offset + len).min(self.len);
        if offset >= end {
            return Ok(());
        }
        rustix::fs::fallocate(
            file,
            rustix::fs::FallocateFlags::empty(),
            offset,
            end - offset,
        )
        .map_err(std::io::Error::from)
    }

    /// Bytes the image file's file system can still give it (`fstatvfs`).
    pub(super) fn backing_free_bytes(&self) -> std::io::Result<u64> {
        let Some(file) = self._file.as_ref() else {
            return Ok(u64::MAX);
        };
        let stat = rustix::fs::fstatvfs(file)?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }

    /// The image file's data runs in `[offset, offset + len)` (`SEEK_DATA`, `SEEK_HOLE`):
    /// sorted, disjoint `(offset, len)` pairs; `None` when the mapping keeps no file.
    pub(super) fn data_runs(
        &self,
        offset: u64,
        len: u64,
    ) -> std::io::Result<Option<Vec<(u64, u64)>>> {
        use rustix::fs::SeekFrom;
        let Some(file) = self._file.as_ref() else {
            return Ok(None);
        };
        let end = (offset + len).min(self.len);
        let (mut at, mut runs) = (offset, Vec::new());
        while at < end {
            let data = match rustix::fs::seek(file, SeekFrom::Data(at)) {
                Ok(data) => data,
                Err(rustix::io::Errno::NXIO) => break, // holes to the end of the file
                Err(e) => return Err(e.into()),
            };
            if data >= end {
                break;
            }
            let hole = rustix::fs::seek(file, SeekFrom::Hole(data))?.min(end);
            runs.push((data, hole - data));
            at = hole;
        }
        Ok(Some(runs))
    }

    /// Bytes of `[offset, offset + len)` that are holes in the image file (`SEEK_DATA`,
    /// `SEEK_HOLE`): pages its file system has yet to give.
    pub(super) fn hole_bytes(&self, offset: u64, len: u64) -> std::io::Result<u64> {
        use rustix::fs::SeekFrom;
        let Some(file) = self._file.as_ref() else {
            return Ok(0);
        };
        let end = (offset + len).min(self.len);
        let (mut at, mut holes) = (offset, 0);
        while at < end {
            let data = match rustix::fs::seek(file, SeekFrom::Data(at)) {
                Ok(data) => data,
                Err(rustix::io::Errno::NXIO) => end, // holes to the end of the file
                Err(e) => return Err(e.into()),
            };
            holes += data.min(end) - at;
            if data >= end {
                break;
            }
            at = rustix::fs::seek(file, SeekFrom::Hole(data))?;
        }
        Ok(holes)
    }
}

// SAFETY: a mapping is memory shared by every thread of the process; its base pointer is only
// dereferenced through bounds-checked methods, and it is unmapped once, when the last owner
// (a `Region`, or a `Populator` thread that the region's owner joins first) drops it.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; every method takes `&self`.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` describe the mapping this struct created and still owns; no
        // reference into it outlives the `Region` that owns this mapping.
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.len as usize) };
    }
}

fn lock(file: &OwnedFd, path: &Path, access: Access) -> Result<()> {
    let operation = match access {
        Access::ReadWrite => FlockOperation::NonBlockingLockExclusive,
        Access::ReadOnly | Access::PrivateCopy => FlockOperation::NonBlockingLockShared,
    };
    match rustix::fs::flock(file, operation) {
        Ok(()) => record_lock(file, path, access),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(Error::InUse(path.to_path_buf())),
        Err(e) => Err(Error::io(
            format!("cannot lock {}", path.display()),
            e.into(),
        )),
    }
}

/// The image's other lock: a record lock over the whole file, held per process (not per open
/// description, as `flock` is), so that processes mapping it through one inherited description
/// (`Mapping::open_descriptor`) exclude each other and everyone who opened it by path. Released
/// when the process closes its descriptor of the image or ends. A file system without record
/// locks (ENOLCK, EINVAL) leaves `flock` alone to guard it.
fn record_lock(file: &OwnedFd, path: &Path, access: Access) -> Result<()> {
    let operation = match access {
        Access::ReadWrite => FlockOperation::NonBlockingLockExclusive,
        Access::ReadOnly | Access::PrivateCopy => FlockOperation::NonBlockingLockShared,
    };
    match rustix::fs::fcntl_lock(file, operation) {
        Ok(()) | Err(rustix::io::Errno::NOLCK | rustix::io::Errno::INVAL) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::ACCESS) => {
            Err(Error::InUse(path.to_path_buf()))
        }
        Err(e) => Err(Error::io(
            format!("cannot lock {}", path.display()),
            e.into(),
        )),
    }
}

fn image_kind_and_size(file: &OwnedFd, path: &Path) -> Result<(MappingKind, u64)> {
    let meta = rustix::fs::fstat(file)
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e.into()))?;
    let ft = FileType::from_raw_mode(meta.st_mode);
    if ft == FileType::RegularFile {
        return Ok((MappingKind::File, meta.st_size as u64));
    }
    if ft == FileType::CharacterDevice {
        let rdev = meta.st_rdev;
        let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
        let sysfs = format!("/sys/dev/char/{major}:{minor}/size");
        let size = read_small_file(&sysfs)
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{} is a character device but not device-dax ({sysfs} unreadable)",
                    path.display()
                ))
            })?;
        return Ok((MappingKind::DevDax, size));
    }
    Err(Error::InvalidArgument(format!(
        "{} is neither a regular file nor a device-dax device",
        path.display()
    )))
}

/// A small text file read with raw system calls (see the module documentation).
fn read_small_file(path: &str) -> Option<String> {
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buf = [0u8; 64];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

fn map_file(
    file: OwnedFd,
    path: &Path,
    kind: MappingKind,
    len: u64,
    options: &RegionOptions,
    zero_filled: bool,
) -> Result<Mapping> {
    if len == 0 {
        return Err(Error::TooSmall {
            path: path.to_path_buf(),
            size_bytes: 0,
            minimum_bytes: crate::format::layout::MIN_IMAGE_BYTES,
        });
    }
    let prot = match options.access {
        Access::ReadOnly => ProtFlags::READ,
        Access::ReadWrite | Access::PrivateCopy => ProtFlags::READ | ProtFlags::WRITE,
    };
    let populate = if options.populate {
        MapFlags::POPULATE
    } else {
        MapFlags::empty()
    };
    let map = |flags: MapFlags| {
        // SAFETY: maps `len` bytes of a file we hold open at a kernel-chosen address; no existing
        // memory is affected.
        unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len as usize,
                prot,
                flags | populate,
                &file,
                0,
            )
        }
    };
    let mut mapped = Err(rustix::io::Errno::INVAL);
    let mut map_sync = false;
    if options.access == Access::ReadWrite {
        // MAP_SYNC succeeds only where stores reach persistent memory directly (DAX); elsewhere
        // the kernel answers EOPNOTSUPP or EINVAL and we fall back to an ordinary shared mapping.
        mapped = map(MapFlags::SHARED_VALIDATE | MapFlags::SYNC);
        map_sync = mapped.is_ok();
    }
    if mapped.is_err() {
        let flags = match options.access {
            Access::PrivateCopy => MapFlags::PRIVATE | MapFlags::NORESERVE,
            Access::ReadWrite | Access::ReadOnly => MapFlags::SHARED,
        };
        mapped = map(flags);
    }
    let base = mapped.map_err(|e| Error::io(format!("cannot map {}", path.display()), e.into()))?;
    if kind == MappingKind::File && options.access == Access::ReadWrite && !map_sync {
        // An image on a tmpfs mounted `huge=advise` gets 2 MiB pages only where asked: then a
        // fresh region costs one fault and one allocation per 2 MiB instead of 512 (a DAX
        // mapping gets them from its file system; `huge=within_size` and `always` need no
        // asking). Elsewhere the advice changes nothing, or is refused (a kernel without
        // transparent huge pages): either way the mapping works as before.
        // SAFETY: advice over the mapping just made, which this function owns; no byte of it
        // changes.
        let _ =
            unsafe { rustix::mm::madvise(base, len as usize, rustix::mm::Advice::LinuxHugepage) };
    }
    Ok(Mapping {
        base: base.cast(),
        len,
        info: MapInfo {
            path: Some(path.to_path_buf()),
            kind,
            access: options.access,
            map_sync,
            zero_filled,
        },
        _file: Some(file),
    })
}
