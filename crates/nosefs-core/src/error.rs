//! Errors of the core, each with the POSIX errno a frontend reports for it.

use std::fmt;
use std::path::PathBuf;

/// The core's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A POSIX error number, as the frontends (FUSE, the preload shim) report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// Input/output error: the media is corrupt or unreadable.
    pub const EIO: Errno = Errno(libc::EIO);
    /// Resource busy: the image is locked by another process.
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    /// No space left on the device.
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// Operation not supported.
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    /// Read-only file system.
    pub const EROFS: Errno = Errno(libc::EROFS);
    /// No such file or directory.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// File exists.
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// Not a directory.
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    /// Is a directory.
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    /// Directory not empty.
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    /// File name too long.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    /// Too many levels of symbolic links.
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// Too many links.
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    /// File too large.
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    /// Permission denied (mode bits).
    pub const EACCES: Errno = Errno(libc::EACCES);
    /// Bad file descriptor.
    pub const EBADF: Errno = Errno(libc::EBADF);
    /// Interrupted by a signal.
    pub const EINTR: Errno = Errno(libc::EINTR);
    /// Not a socket.
    pub const ENOTSOCK: Errno = Errno(libc::ENOTSOCK);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// Everything the core can fail with. Corrupt media is always an error, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the image.
    #[error("image {} is in use by another process (it is locked)", .0.display())]
    InUse(PathBuf),
    /// The image is smaller than the smallest valid image.
    #[error("{} is {size_bytes} bytes, smaller than the minimum noseFS image of {minimum_bytes} bytes", path.display())]
    TooSmall {
        /// The image.
        path: PathBuf,
        /// Its size.
        size_bytes: u64,
        /// The smallest image noseFS accepts.
        minimum_bytes: u64,
    },
    /// The image is not a noseFS image at all.
    #[error("not a noseFS image: {0}")]
    NotAnImage(String),
    /// A noseFS image this build cannot use.
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// A structure on the media breaks an invariant of the format.
    #[error("corrupt {structure}.{field}: {detail}")]
    Corrupt {
        /// The on-media structure, e.g. `superblock`.
        structure: &'static str,
        /// The field, e.g. `checksum`.
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The caller asked for something impossible or malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// A file-system operation failed with this errno.
    #[error("{0}")]
    Errno(Errno),
}

impl Error {
    /// An I/O error with its context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A corruption error naming the structure and field.
    pub fn corrupt(
        structure: &'static str,
        field: &'static str,
        detail: impl Into<String>,
    ) -> Error {
        Error::Corrupt {
            structure,
            field,
            detail: detail.into(),
        }
    }

    /// The errno a frontend reports for this error.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Io { source, .. } => Errno(source.raw_os_error().unwrap_or(libc::EIO)),
            Error::InUse(_) => Errno::EBUSY,
            Error::TooSmall { .. } | Error::InvalidArgument(_) => Errno::EINVAL,
            Error::NotAnImage(_) | Error::Corrupt { .. } => Errno::EIO,
            Error::Unsupported(_) => Errno::ENOTSUP,
            Error::Errno(e) => *e,
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::Errno(e)
    }
}
