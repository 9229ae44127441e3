//! `mmap`: per thread, 4 KiB stores at random page offsets of a mapped file, with msync of the
//! stored page after each (seed 001 IV-B, Fig. 10): files of 1-12 MiB mapped whole; a file larger
//! than the last-level cache (1 GiB; `--quick` 64 MiB); and the smallest file through a mapping
//! much larger than it (2 GiB; `--quick` 256 MiB), as LMDB maps its whole map size. The last two
//! again with msync of the whole mapping after each store (`msync=mapping`), as LMDB syncs its
//! map: the file system must find the one written page itself.

use std::io;

use super::{offsets, Measured, Sizes};
use crate::runner::{combine_threads, parallel};
use crate::target::{cname, Target};

const PAGE: u64 = 4096;

/// One phase: a file of `file_mib` mapped `map_mib` long.
#[derive(Debug, Clone, Copy)]
struct Phase {
    file_mib: u64,
    map_mib: u64,
    /// Each msync covers the whole mapping, not only the page stored to.
    whole: bool,
}

impl Phase {
    fn variant(self) -> String {
        let mut v = if self.map_mib == self.file_mib {
            format!("file={}MiB", self.file_mib)
        } else {
            format!("file={}MiB,map={}MiB", self.file_mib, self.map_mib)
        };
        if self.whole {
            v.push_str(",msync=mapping");
        }
        v
    }
}

fn phases(sizes: &Sizes) -> Vec<Phase> {
    let mut all: Vec<Phase> = sizes
        .mmap_mib
        .iter()
        .chain(std::iter::once(&sizes.mmap_large_mib))
        .map(|&mib| Phase {
            file_mib: mib,
            map_mib: mib,
            whole: false,
        })
        .collect();
    let large = Phase {
        file_mib: sizes.mmap_large_mib,
        map_mib: sizes.mmap_large_mib,
        whole: true,
    };
    if let Some(&smallest) = sizes.mmap_mib.iter().min() {
        let sparse = Phase {
            file_mib: smallest,
            map_mib: sizes.mmap_sparse_map_mib.max(smallest),
            whole: false,
        };
        all.extend([
            sparse,
            Phase {
                whole: true,
                ..sparse
            },
        ]);
    }
    all.push(large);
    all
}

/// Runs every phase with `threads` threads, each on its own files.
pub fn run_once<T: Target>(target: &T, threads: usize, sizes: &Sizes) -> io::Result<Vec<Measured>> {
    let n = sizes.mmap_writes;
    let phases = phases(sizes);
    let counters = || target.counters();
    let per_thread = parallel(threads, |i, gate| {
        let page = vec![0x6du8; PAGE as usize];
        let mut samples = Vec::new();
        for (j, phase) in phases.iter().enumerate() {
            let len = phase.file_mib << 20;
            let name = cname(&format!("map{i:03}-{j}"));
            let map = target.map(target.root(), &name, len, phase.map_mib << 20)?;
            // Touch and write back every page first, so that page faults and block allocation
            // stay out of the timed phase.
            for offset in (0..len).step_by(PAGE as usize) {
                target.map_write(&map, offset, &page);
            }
            target.msync(&map, 0, len)?;
            let seed = 0x0051_ed27 ^ ((i as u64) << 20) ^ phase.file_mib ^ (phase.map_mib << 32);
            let at = offsets(n, len, PAGE, seed);
            samples.push(gate.timed(&counters, n, |k| {
                target.map_write(&map, at[k], &page);
                if phase.whole {
                    target.msync(&map, 0, phase.map_mib << 20)
                } else {
                    target.msync(&map, at[k], PAGE)
                }
            })?);
            // One phase's file alive at a time (the image is sized for that, with room for
            // what the overwrites take before their commits free the blocks they replace).
            drop(map);
            target.unlink(target.root(), &name)?;
        }
        Ok(samples)
    })?;
    Ok(phases
        .iter()
        .zip(combine_threads(per_thread))
        .map(|(phase, sample)| Measured {
            op: "write+msync".into(),
            io_size: PAGE,
            variant: phase.variant(),
            sample,
        })
        .collect())
}
