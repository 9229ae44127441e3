//! `calls`: what making a call costs, apart from the work it does. `lseek(fd, 0, SEEK_CUR)` does
//! nothing but find the open file and read its offset, so on the target's file it is the path
//! into the file system (for `nosefs-preload`: libc, the shim's hook, the descriptor table, the
//! core's answer; for a kernel file system: libc and a system call), and on a file outside the
//! target (`lseek-kernel`, a file in /dev/shm) it is what a program pays for calls that are not
//! the file system's: under the shim, the same system call plus the hook's one table load.

use std::ffi::CString;
use std::io;

use super::Measured;
use crate::runner::{combine_threads, parallel};
use crate::sys;
use crate::target::{cname, Target};

/// The timed phases, in order.
pub const OPS: [&str; 2] = ["lseek", "lseek-kernel"];

/// Runs both phases, `calls` calls per thread each.
pub fn run_once<T: Target>(target: &T, threads: usize, calls: usize) -> io::Result<Vec<Measured>> {
    let counters = || target.counters();
    let per_thread = parallel(threads, |i, gate| {
        let file = target.open(target.root(), &cname(&format!("calls{i:03}")), true)?;
        target.seek_current(&file)?;
        let outside = CString::new(format!(
            "/dev/shm/nosefs-bench-calls-{}-{i}",
            std::process::id()
        ))
        .expect("no NUL in the path");
        let kernel = sys::openat(None, &outside, libc::O_CREAT | libc::O_RDWR, 0o600);
        let _ = std::fs::remove_file(outside.to_str().expect("ASCII path"));
        let kernel = kernel?;
        for _ in 0..calls / 10 {
            target.seek_current(&file)?;
            sys::seek_current(std::os::fd::AsFd::as_fd(&kernel))?;
        }
        let ours = gate.timed(&counters, calls, |_| target.seek_current(&file).map(drop))?;
        let theirs = gate.timed(&counters, calls, |_| {
            sys::seek_current(std::os::fd::AsFd::as_fd(&kernel)).map(drop)
        })?;
        target.close(file)?;
        Ok(vec![ours, theirs])
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
