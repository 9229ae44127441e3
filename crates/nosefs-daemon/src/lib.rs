//! The daemon transport: `nosefs mount` serves LD_PRELOAD clients (the shim) over shared
//! memory, besides the kernel's FUSE requests, so every process on the machine works on one
//! image at near-library speed.
//!
//! - [`service`]: the calls a shim makes, as one trait: [`service::Local`] on an `Fs` in this
//!   process (embedded mode; the daemon executing a request), [`client::Remote`] through a
//!   daemon.
//! - [`proto`]: the encoding of requests and replies.
//! - [`read_cache`]: when a client reads from its own view of the image.
//! - [`shm`]: the shared request area; with [`sys`] (two system calls rustix lacks) the
//!   crate's only `unsafe`.
//! - [`server`]: the daemon side; [`client`]: the shim side; [`wait`]: how either waits for
//!   the other; [`workers`]: the daemon's server threads, kept between clients.

#![deny(unsafe_code)]

pub mod client;
pub mod proto;
pub mod read_cache;
pub mod server;
pub mod service;
#[allow(unsafe_code)]
pub mod shm;
pub mod stats;
#[allow(unsafe_code)]
pub mod sys;
pub mod wait;
pub mod workers;
