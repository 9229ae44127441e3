//! `calls`: what making a call costs, apart from the work it does, and what the commonest
//! metadata calls cost on top of it.
//!
//! `lseek(fd, 0, SEEK_CUR)` does nothing but find the open file and read its offset, so on the
//! target's file it is the path into the file system (for `nosefs-preload`: libc, the shim's
//! hook, the descriptor table, the core's answer; for a kernel file system: libc and a system
//! call), and on a file outside the target (`lseek-kernel`, a file in /dev/shm) it is what a
//! program pays for calls that are not the file system's: under the shim, the same system call
//! plus the hook's one table load. Then the calls git, make and rsync make most, each on a
//! file of the run's directory: `fstat` of the open file, `stat` of its name (a lookup and the
//! attributes), and `open-close` (a lookup, an open description, its release). For daemon
//! clients each is one request to the daemon, so beside the library's figure they show what
//! a round trip adds (issue 39's "fewer round trips for names and attributes").

use std::ffi::CString;
use std::io;

use super::Measured;
use crate::runner::{combine_threads, parallel};
use crate::sys;
use crate::target::{cname, Target};

/// The timed phases, in order.
pub const OPS: [&str; 5] = ["lseek", "lseek-kernel", "fstat", "stat", "open-close"];

/// Runs every phase, `calls` calls per thread each.
pub fn run_once<T: Target>(target: &T, threads: usize, calls: usize) -> io::Result<Vec<Measured>> {
    let counters = || target.counters();
    let per_thread = parallel(threads, |i, gate| {
        let name = cname(&format!("calls{i:03}"));
        let file = target.open(target.root(), &name, true)?;
        target.seek_current(&file)?;
        let outside = CString::new(format!(
            "/dev/shm/nosefs-bench-calls-{}-{i}",
            std::process::id()
        ))
        .expect("no NUL in the path");
        let kernel = sys::openat(None, &outside, libc::O_CREAT | libc::O_RDWR, 0o600);
        let _ = std::fs::remove_file(outside.to_str().expect("ASCII path"));
        let kernel = kernel?;
        // Warm both paths (the shim's connection, the daemon's thread, the caches).
        for _ in 0..calls / 10 {
            target.seek_current(&file)?;
            sys::seek_current(std::os::fd::AsFd::as_fd(&kernel))?;
            target.fstat(&file)?;
            target.stat(target.root(), &name)?;
        }
        let ours = gate.timed(&counters, calls, |_| target.seek_current(&file).map(drop))?;
        let theirs = gate.timed(&counters, calls, |_| {
            sys::seek_current(std::os::fd::AsFd::as_fd(&kernel)).map(drop)
        })?;
        let fstat = gate.timed(&counters, calls, |_| target.fstat(&file).map(drop))?;
        let stat = gate.timed(&counters, calls, |_| {
            target.stat(target.root(), &name).map(drop)
        })?;
        let open_close = gate.timed(&counters, calls, |_| {
            target.close(target.open(target.root(), &name, false)?)
        })?;
        target.close(file)?;
        Ok(vec![ours, theirs, fstat, stat, open_close])
    })?;
    Ok(OPS
        .iter()
        .zip(combine_threads(per_thread))
        .map(|(op, sample)| Measured {
            op: (*op).into(),
            io_size: 0,
            variant: String::new(),
            sample,
        })
        .collect())
}
