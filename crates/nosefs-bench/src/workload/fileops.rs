//! `fileops`: per thread, one file: 4 KiB appends with fsync after each, 4 KiB sequential writes
//! without fsync (the fio `psync` comparison), byte-granular random overwrites of 1-16 KiB with
//! fsync after each (seed 001 IV-B, Fig. 8), page-aligned random overwrites of 4, 8 and 16 KiB
//! with fsync after each (a database writing its pages: SQLite, PostgreSQL, InnoDB), and random
//! reads of 1-256 KiB. The full file (20,000 blocks, 80 MiB) is larger than the last-level cache.

use std::io;

use super::{offsets, Measured, Sizes};
use crate::runner::{combine_threads, parallel};
use crate::target::{cname, Needs, Target};

const BLOCK: usize = 4096;
const WARMUP_OPS: usize = 256;

/// What one thread keeps alive. Random byte-granular overwrites leave partly overwritten blocks
/// referenced until fsync's window rewrite reclaims them, so a file of N bytes can hold up to
/// about twice that; the image gets four times the file.
pub fn needs(sizes: &Sizes) -> Needs {
    Needs {
        names: 2,
        data_bytes: (4 * sizes.writes * BLOCK + WARMUP_OPS * BLOCK) as u64,
    }
}

/// Runs every phase with `threads` threads, each on its own file.
pub fn run_once<T: Target>(target: &T, threads: usize, sizes: &Sizes) -> io::Result<Vec<Measured>> {
    let n = sizes.writes;
    let file_bytes = (n * BLOCK) as u64;
    let largest = sizes
        .overwrite_sizes
        .iter()
        .chain(&sizes.aligned_sizes)
        .chain(&sizes.read_sizes)
        .max()
        .copied()
        .unwrap_or(0);
    assert!(
        largest as u64 <= file_bytes,
        "{n} writes of 4 KiB make a file smaller than a {largest}-byte operation"
    );
    let counters = || target.counters();
    let per_thread = parallel(threads, |i, gate| {
        warm_up(target, i)?;
        let file = target.open(target.root(), &cname(&format!("file{i:03}")), true)?;
        let block = vec![0xa5u8; BLOCK];
        let mut samples = Vec::new();
        samples.push(gate.timed(&counters, n, |k| {
            target.pwrite(&file, (k * BLOCK) as u64, &block)?;
            target.fsync(&file)
        })?);
        samples.push(gate.timed(&counters, n, |k| {
            target.pwrite(&file, (k * BLOCK) as u64, &block)
        })?);
        target.fsync(&file)?;
        for (j, &size) in sizes.overwrite_sizes.iter().enumerate() {
            let data = vec![0x3cu8 ^ j as u8; size];
            let at = offsets(n, file_bytes - size as u64 + 1, 1, seed(i, j));
            samples.push(gate.timed(&counters, n, |k| {
                target.pwrite(&file, at[k], &data)?;
                target.fsync(&file)
            })?);
        }
        for (j, &size) in sizes.aligned_sizes.iter().enumerate() {
            let page = vec![0x6du8 ^ j as u8; size];
            let at = offsets(n, file_bytes, size as u64, seed(i, 50 + j));
            samples.push(gate.timed(&counters, n, |k| {
                target.pwrite(&file, at[k], &page)?;
                target.fsync(&file)
            })?);
        }
        for (j, &size) in sizes.read_sizes.iter().enumerate() {
            let mut buf = vec![0u8; size];
            let at = offsets(n, file_bytes - size as u64 + 1, 1, seed(i, 100 + j));
            samples.push(gate.timed(&counters, n, |k| target.pread(&file, at[k], &mut buf))?);
        }
        target.close(file)?;
        Ok(samples)
    })?;
    let phases = std::iter::once(("append+fsync", BLOCK))
        .chain(std::iter::once(("write", BLOCK)))
        .chain(
            sizes
                .overwrite_sizes
                .iter()
                .map(|&s| ("overwrite+fsync", s)),
        )
        .chain(
            sizes
                .aligned_sizes
                .iter()
                .map(|&s| ("aligned-overwrite+fsync", s)),
        )
        .chain(sizes.read_sizes.iter().map(|&s| ("read", s)));
    Ok(phases
        .zip(combine_threads(per_thread))
        .map(|((op, io_size), sample)| Measured {
            op: op.into(),
            io_size: io_size as u64,
            variant: String::new(),
            sample,
        })
        .collect())
}

fn seed(thread: usize, phase: usize) -> u64 {
    0x9e37_79b9_7f4a_7c15 ^ ((thread as u64) << 32) ^ phase as u64
}

/// Appends with fsync and reads back a small file of its own, untimed.
fn warm_up<T: Target>(target: &T, thread: usize) -> io::Result<()> {
    let file = target.open(target.root(), &cname(&format!("warm{thread:03}")), true)?;
    let mut block = vec![1u8; BLOCK];
    for k in 0..WARMUP_OPS {
        target.pwrite(&file, (k * BLOCK) as u64, &block)?;
        target.fsync(&file)?;
    }
    for k in 0..WARMUP_OPS {
        target.pread(&file, (k * BLOCK) as u64, &mut block)?;
    }
    target.close(file)
}
