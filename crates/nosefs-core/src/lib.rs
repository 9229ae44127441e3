//! noseFS core: the persistent-memory layer, the on-media format, mkfs, info and fsck.
//!
//! Every frontend (the `nosefs` CLI, the FUSE mount, the LD_PRELOAD shim, the daemon, the
//! benchmark) reaches persistent memory only through this crate. Only [`pmem`] holds `unsafe`
//! code that touches the image; `file::mmap_sys` holds the rest (mapped files' memfd views and
//! the kernel's write tracking).
//! See ARCHITECTURE.md for the map and docs/format.md for the byte layout.

#![deny(unsafe_code)]

pub mod alloc;
pub mod error;
pub mod file;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod image;
pub mod info;
pub(crate) mod inode;
pub mod journal;
pub mod mkfs;
pub mod namespace;
pub mod padded;
pub mod pmem;
pub(crate) mod pool;
pub(crate) mod recovery;
pub(crate) mod settle;
pub mod vfs;

pub use error::{Errno, Error, Result};
pub use fs::{Fs, MountOptions};
