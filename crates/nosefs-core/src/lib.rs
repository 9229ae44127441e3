//! noseFS core: the persistent-memory layer, the on-media format, mkfs, info and fsck.
//!
//! Every frontend (the `nosefs` CLI today; the FUSE mount, the LD_PRELOAD shim and the benchmark
//! to come) reaches persistent memory only through this crate. Only [`pmem`] holds `unsafe` code.
//! See ARCHITECTURE.md for the map and docs/format.md for the byte layout.

#![deny(unsafe_code)]

pub mod alloc;
pub mod error;
pub mod file;
pub mod format;
pub mod fsck;
pub mod image;
pub mod info;
pub mod mkfs;
pub mod namespace;
pub mod pmem;
pub mod vfs;

pub use error::{Errno, Error, Result};
