//! Mapping an image into memory: regular files, DAX files, device-dax, and anonymous memory.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

// Linux values; spelled out so that older `libc` releases without them still build.
const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
const MAP_SYNC: libc::c_int = 0x80000;

#[derive(Debug)]
pub(super) struct Mapping {
    base: *mut u8,
    len: u64,
    info: MapInfo,
    // Held for the flock: closing the file releases the lock.
    _file: Option<File>,
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

    /// `msync(MS_SYNC)` over the pages covering `[offset, offset + len)`, which the caller has
    /// bounds-checked.
    pub(super) fn msync(&self, offset: u64, len: u64) -> std::io::Result<()> {
        const PAGE: u64 = 4096;
        let start = offset - offset % PAGE;
        let end = (offset + len).min(self.len);
        // SAFETY: `[start, end)` lies inside the mapping this struct owns (start is rounded down
        // to a page boundary inside it); msync only asks the kernel to write pages back.
        let rc = unsafe {
            libc::msync(
                self.base.add(start as usize).cast(),
                (end - start) as usize,
                libc::MS_SYNC,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    pub(super) fn open(path: &Path, options: &RegionOptions) -> Result<Mapping> {
        let writable = options.access == Access::ReadWrite;
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io(format!("cannot open image {}", path.display()), e))?;
        lock(&file, path, options.access)?;
        let (kind, len) = image_kind_and_size(&file, path)?;
        map_file(file, path, kind, len, options, false)
    }

    pub(super) fn create(
        path: &Path,
        size_bytes: Option<u64>,
        options: &RegionOptions,
    ) -> Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io(format!("cannot create image {}", path.display()), e))?;
        lock(&file, path, Access::ReadWrite)?;
        let (kind, current_len) = image_kind_and_size(&file, path)?;
        let (len, zero_filled) = match (kind, size_bytes) {
            (MappingKind::File, Some(size)) => {
                // Dropping every page first makes the whole file read as zero at no cost, so
                // mkfs needs to write only what it formats.
                let resize = file.set_len(0).and_then(|()| file.set_len(size));
                resize.map_err(|e| Error::io(format!("cannot size {}", path.display()), e))?;
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

    pub(super) fn anonymous(len: u64) -> Result<Mapping> {
        if len == 0 {
            return Err(Error::InvalidArgument("empty region".into()));
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len as usize, prot, flags, -1, 0) };
        if base == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(Error::io(format!("cannot map {len} bytes of memory"), e));
        }
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

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` describe the mapping this struct created and still owns; no
        // reference into it outlives the `Region` that owns this mapping.
        unsafe { libc::munmap(self.base.cast(), self.len as usize) };
    }
}

fn lock(file: &File, path: &Path, access: Access) -> Result<()> {
    let mode = match access {
        Access::ReadWrite => libc::LOCK_EX,
        Access::ReadOnly | Access::PrivateCopy => libc::LOCK_SH,
    };
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Err(Error::InUse(path.to_path_buf()));
    }
    Err(Error::io(format!("cannot lock {}", path.display()), e))
}

fn image_kind_and_size(file: &File, path: &Path) -> Result<(MappingKind, u64)> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok((MappingKind::File, meta.len()));
    }
    if ft.is_char_device() {
        use std::os::unix::fs::MetadataExt;
        let rdev = meta.rdev();
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        let sysfs = format!("/sys/dev/char/{major}:{minor}/size");
        let size = std::fs::read_to_string(&sysfs)
            .ok()
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

fn map_file(
    file: File,
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
        Access::ReadOnly => libc::PROT_READ,
        Access::ReadWrite | Access::PrivateCopy => libc::PROT_READ | libc::PROT_WRITE,
    };
    let populate = if options.populate {
        libc::MAP_POPULATE
    } else {
        0
    };
    let fd = file.as_raw_fd();
    let map = |flags: libc::c_int| {
        // SAFETY: maps `len` bytes of a file we hold open at a kernel-chosen address; no existing
        // memory is affected. The result is checked against MAP_FAILED by the caller.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                prot,
                flags | populate,
                fd,
                0,
            )
        }
    };
    let mut map_sync = false;
    let mut base = libc::MAP_FAILED;
    if options.access == Access::ReadWrite {
        // MAP_SYNC succeeds only where stores reach persistent memory directly (DAX); elsewhere
        // the kernel answers EOPNOTSUPP or EINVAL and we fall back to an ordinary shared mapping.
        base = map(MAP_SHARED_VALIDATE | MAP_SYNC);
        map_sync = base != libc::MAP_FAILED;
    }
    if base == libc::MAP_FAILED {
        let flags = match options.access {
            Access::PrivateCopy => libc::MAP_PRIVATE | libc::MAP_NORESERVE,
            Access::ReadWrite | Access::ReadOnly => libc::MAP_SHARED,
        };
        base = map(flags);
    }
    if base == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(Error::io(format!("cannot map {}", path.display()), e));
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
