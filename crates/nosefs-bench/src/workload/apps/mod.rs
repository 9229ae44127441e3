//! Application workloads (issue 38): the real programs, unmodified, on the target, with their own
//! durability settings, timed per operation by a small client, and their data checked after the
//! run (a workload that loses or corrupts data fails the run loudly).
//!
//! - `sqlite`: Debian's python3 and its SQLite; one durable transaction per operation
//!   (`synchronous=FULL`), inserts of 100-byte rows then updates of random rows (a database's
//!   page rewrites), in rollback-journal and WAL mode; then `PRAGMA integrity_check` and the
//!   row count.
//! - `redis`: redis-server with `appendonly yes` and `appendfsync always` (every write durable
//!   before its reply); one client sends SET, INCR and LPUSH over a socket, one at a time; then
//!   the server is stopped without a save and started again, and must read back every key,
//!   the counter and the list from its append-only file.
//! - `kv`: YCSB's core workloads A-F (seed 000 Table II: read/update, read-mostly, read-only,
//!   read-latest with inserts, short scans with inserts, read-modify-write; zipfian keys, the
//!   latest for D), 1 KB records, every write durable: on LMDB (python3-lmdb, memory-mapped like
//!   seed 000's MongoDB engine; default and writemap) and on LevelDB (python3-plyvel, an LSM
//!   store with its log synced); then every record the run wrote is read back and compared.
//! - `rocksdb`: RocksDB's own benchmark, db_bench, every write synced to its log: fillseq,
//!   overwrite and readrandom in one process; then a second process must find every key.
//! - `oltp` (`oltp/`): PostgreSQL 15 (pgbench's TPC-B-like transactions and a TPC-C-like mix),
//!   MariaDB (sysbench oltp_read_write) and SQLite (the TPC-C-like mix, one client), each with
//!   its default durability; then a restart and checks of everything committed. The servers
//!   of many processes do not run in embedded mode, which serves one process at a time.
//! - `tools`: a source tree of 2,000 files in 40 directories unpacked with tar, committed with git,
//!   cloned with git, built with make -j2 (every source file copied to an output by a rule), and
//!   copied with rsync -a; each step one timed operation, every output compared with its source
//!   afterwards. Several processes at once (make's jobs, git clone's and rsync's helpers): not in
//!   embedded mode.
//!
//! Where the programs run: on the target's directory (tmpfs, a ramdisk, a FUSE mount), or under
//! the preload shim (`nosefs-client`: clients of a noseFS mount's daemon; `nosefs-preload`: an
//! embedded image made for the run, not populated, as `nosefs run` maps it). The SQLite driver
//! runs under the shim itself; the Redis client talks to the server over TCP from outside it.
//! One client: a thread count above one is reported as not run.

mod kv;
mod oltp;
mod redis;
mod rocksdb;
mod sqlite;
mod tools;

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::Measured;
use crate::runner::Sample;
use crate::stats::histogram;

/// An application workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum App {
    /// SQLite through python3, rollback journal and WAL.
    Sqlite,
    /// Redis with an append-only file synced at every write.
    Redis,
    /// YCSB A-F on LMDB and LevelDB.
    Kv,
    /// RocksDB's db_bench, every write synced.
    Rocksdb,
    /// TPC-B and TPC-C-like on PostgreSQL, sysbench on MariaDB, TPC-C-like on SQLite.
    Oltp,
    /// tar, git, make and rsync on a source tree.
    Tools,
}

impl App {
    /// The workload's name.
    pub fn name(self) -> &'static str {
        match self {
            App::Sqlite => "sqlite",
            App::Redis => "redis",
            App::Kv => "kv",
            App::Rocksdb => "rocksdb",
            App::Oltp => "oltp",
            App::Tools => "tools",
        }
    }
}

/// How the programs of a run reach the target.
#[derive(Debug, Clone)]
pub struct Place {
    /// The directory the programs work in (under the shim's prefix when `shim` is set).
    pub dir: PathBuf,
    /// The preload shim, the prefix it serves (`NOSEFS_AT`: a mount point in daemon mode) and,
    /// for embedded mode, the image; `None`: the kernel's directory.
    pub shim: Option<Shim>,
}

/// How the preload shim serves a place.
#[derive(Debug, Clone)]
pub struct Shim {
    /// The shim library.
    pub lib: PathBuf,
    /// Its prefix.
    pub at: PathBuf,
    /// The image, in embedded mode; `None`: the daemon of the mount at `at`.
    pub image: Option<PathBuf>,
}

impl Place {
    /// `program`, set up to run on the target.
    pub(super) fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.stdin(Stdio::null()).env("LC_ALL", "C");
        match &self.shim {
            Some(Shim { lib, at, image }) => {
                c.env("LD_PRELOAD", lib).env("NOSEFS_AT", at);
                match image {
                    Some(image) => c.env("NOSEFS_IMAGE", image),
                    None => c.env_remove("NOSEFS_IMAGE"),
                };
            }
            None => {
                c.env_remove("LD_PRELOAD");
            }
        }
        c
    }

    /// Refuses a workload whose programs run several processes at once where the place is
    /// embedded mode, which serves one process at a time; `what` says which.
    pub(super) fn many_processes(&self, what: &str) -> io::Result<()> {
        if matches!(&self.shim, Some(s) if s.image.is_some()) {
            return Err(unsupported(format!(
                "{what}; embedded mode serves one process at a time"
            )));
        }
        Ok(())
    }

    /// Runs `program args` on the place (so that a directory made in embedded mode is made in
    /// the image, not in the kernel's directory under the prefix).
    pub(super) fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> io::Result<()> {
        let out = self.command(program).args(args).output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "{program} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }
}

/// Runs `app` once on `place` with `threads` clients.
pub fn run_once(app: App, place: &Place, threads: usize, ops: usize) -> io::Result<Vec<Measured>> {
    if threads != 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "application workloads run one client",
        ));
    }
    match app {
        App::Sqlite => sqlite::run(place, ops),
        App::Redis => redis::run(place, ops),
        App::Kv => kv::run(place, ops),
        App::Rocksdb => rocksdb::run(place, ops),
        App::Oltp => oltp::run(place, ops),
        App::Tools => tools::run(place),
    }
}

pub(super) const PYTHON: &str = "/usr/bin/python3";

/// A workload this place or machine cannot run, and why.
pub(super) fn unsupported(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, why)
}

/// Unsupported unless every one of `programs` (paths) is installed.
pub(super) fn installed(programs: &[&str]) -> io::Result<()> {
    match programs.iter().find(|p| !Path::new(p).exists()) {
        Some(missing) => Err(unsupported(format!("{missing} is not installed"))),
        None => Ok(()),
    }
}

/// Runs `c`; its standard output, or an error naming `what` with its standard error.
pub(super) fn checked(mut c: Command, what: &str) -> io::Result<String> {
    let out = c
        .output()
        .map_err(|e| io::Error::other(format!("cannot run {what}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) fn path_arg(path: &Path) -> io::Result<&str> {
    path.to_str()
        .ok_or_else(|| io::Error::other("the target's path is not UTF-8"))
}

/// Runs a python driver on `place`; its JSON report.
pub(super) fn run_driver(
    place: &Place,
    script: &str,
    args: &[&str],
) -> io::Result<serde_json::Value> {
    let out = place
        .command(PYTHON)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| io::Error::other(format!("cannot run {PYTHON}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "the driver failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| io::Error::other(format!("the driver's report does not parse: {e}")))
}

/// One phase of a driver's report as a measurement.
pub(super) fn measured(
    phase: &serde_json::Value,
    variant: &str,
    io_size: u64,
) -> io::Result<Measured> {
    let bad = || io::Error::other("the driver's phase is malformed");
    let op = phase["op"].as_str().ok_or_else(bad)?;
    let elapsed_ns = phase["elapsed_ns"].as_u64().ok_or_else(bad)?;
    let latencies: Vec<u64> = phase["lat"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|l| l.as_u64().ok_or_else(bad))
        .collect::<io::Result<_>>()?;
    timed(op, variant, io_size, elapsed_ns, &latencies)
}

/// A timed phase: one latency per operation (ns) over `elapsed_ns`.
pub(super) fn timed(
    op: &str,
    variant: &str,
    io_size: u64,
    elapsed_ns: u64,
    latencies_ns: &[u64],
) -> io::Result<Measured> {
    let mut hist = histogram();
    for &l in latencies_ns {
        hist.record(l.max(1))
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(Measured {
        op: op.to_string(),
        io_size,
        variant: variant.to_string(),
        sample: Sample {
            ops: latencies_ns.len() as u64,
            elapsed_ns,
            hist,
            flushes: None,
            fences: None,
        },
    })
}
