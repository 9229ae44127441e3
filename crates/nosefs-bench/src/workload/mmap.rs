//! `mmap`: per thread and file size, 4 KiB writes at random page offsets of a mapped file of
//! 1-12 MiB, with msync of the written page after each (seed 001 IV-B, Fig. 10).

use std::io;

use super::{offsets, Measured, Sizes};
use crate::runner::{combine_threads, parallel};
use crate::target::{cname, Target};

const PAGE: u64 = 4096;

/// Runs one phase per file size with `threads` threads, each on its own files.
pub fn run_once<T: Target>(target: &T, threads: usize, sizes: &Sizes) -> io::Result<Vec<Measured>> {
    let n = sizes.mmap_writes;
    let counters = || target.counters();
    let per_thread = parallel(threads, |i, gate| {
        let page = vec![0x6du8; PAGE as usize];
        let mut samples = Vec::new();
        for &mib in &sizes.mmap_mib {
            let len = mib << 20;
            let name = cname(&format!("map{i:03}-{mib}"));
            let map = target.map(target.root(), &name, len)?;
            // Touch and write back every page first, so that page faults and block allocation
            // stay out of the timed phase.
            for offset in (0..len).step_by(PAGE as usize) {
                target.map_write(&map, offset, &page);
            }
            target.msync(&map, 0, len)?;
            let at = offsets(n, len, PAGE, 0x0051_ed27 ^ ((i as u64) << 20) ^ mib);
            samples.push(gate.timed(&counters, n, |k| {
                target.map_write(&map, at[k], &page);
                target.msync(&map, at[k], PAGE)
            })?);
        }
        Ok(samples)
    })?;
    Ok(sizes
        .mmap_mib
        .iter()
        .zip(combine_threads(per_thread))
        .map(|(mib, sample)| Measured {
            op: "write+msync".into(),
            io_size: PAGE,
            variant: format!("file={mib}MiB"),
            sample,
        })
        .collect())
}
