//! `dirops`: create, rename and unlink N files; each thread works in its own directory (seed 001
//! IV-B, Fig. 6 and 7). A create is open(O_CREAT|O_EXCL) and close.

use std::io;

use super::Measured;
use crate::runner::{combine_threads, parallel};
use crate::target::{cname, names, Target};

/// Files each thread creates, renames and unlinks, untimed, before the timed phases.
pub const WARMUP_FILES: usize = 1000;

/// The timed phases, in order.
pub const OPS: [&str; 3] = ["create", "rename", "unlink"];

/// Runs the three phases with `threads` threads of `files` files each.
pub fn run_once<T: Target>(target: &T, threads: usize, files: usize) -> io::Result<Vec<Measured>> {
    let counters = || target.counters();
    let per_thread = parallel(threads, |i, gate| {
        let root = target.root();
        let dir = target.mkdir(root, &cname(&format!("dir{i:03}")))?;
        let first = names("f", i, files);
        let second = names("r", i, files);
        warm_up(target, i)?;
        let create = gate.timed(&counters, files, |k| target.create(&dir, &first[k]))?;
        let rename = gate.timed(&counters, files, |k| {
            target.rename(&dir, &first[k], &dir, &second[k])
        })?;
        let unlink = gate.timed(&counters, files, |k| target.unlink(&dir, &second[k]))?;
        Ok(vec![create, rename, unlink])
    })?;
    Ok(OPS
        .iter()
        .zip(combine_threads(per_thread))
        .map(|(op, sample)| Measured {
            op: (*op).into(),
            io_size: 0,
            variant: format!("files={files}"),
            sample,
        })
        .collect())
}

/// Creates, renames and unlinks [`WARMUP_FILES`] files in a directory of their own.
fn warm_up<T: Target>(target: &T, thread: usize) -> io::Result<()> {
    let dir = target.mkdir(target.root(), &cname(&format!("warm{thread:03}")))?;
    let first = names("w", thread, WARMUP_FILES);
    let second = names("x", thread, WARMUP_FILES);
    for (a, b) in first.iter().zip(&second) {
        target.create(&dir, a)?;
        target.rename(&dir, a, &dir, b)?;
        target.unlink(&dir, b)?;
    }
    Ok(())
}
