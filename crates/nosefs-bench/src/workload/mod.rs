//! The micro-benchmark workloads of seed 001 section IV-B, generic over [`Target`].
//!
//! A workload runs once on a fresh target instance with a number of threads and returns one
//! [`Measured`] per timed phase; the suite repeats runs and summarizes.

use std::io;

use crate::runner::Sample;
use crate::target::{Needs, Target};

pub mod apps;
pub mod calls;
pub mod dirops;
pub mod filebench;
pub mod fileops;
pub mod fragment;
pub mod mmap;

/// One timed phase of one run (all threads combined).
#[derive(Debug, Clone)]
pub struct Measured {
    /// Operation, e.g. `create` or `overwrite+fsync`.
    pub op: String,
    /// Bytes per operation (0 for metadata operations).
    pub io_size: u64,
    /// Parameters that distinguish phases with the same op, e.g. `files=100000`.
    pub variant: String,
    /// The measurements.
    pub sample: Sample,
}

/// Sizes of the workloads: the full defaults, or the `--quick` ones.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Sizes {
    /// `dirops`: files per thread (each value is its own set of runs).
    pub files: Vec<usize>,
    /// `fileops`: operations per thread in each write and read phase.
    pub writes: usize,
    /// `fileops`: sizes of the byte-granular random overwrites, each followed by fsync.
    pub overwrite_sizes: Vec<usize>,
    /// `fileops`: sizes of the page-aligned random overwrites (each at a multiple of its size:
    /// database pages), each followed by fsync.
    pub aligned_sizes: Vec<usize>,
    /// `fileops`: sizes of the random reads.
    pub read_sizes: Vec<usize>,
    /// `mmap`: sizes of the mapped file, in MiB.
    pub mmap_mib: Vec<u64>,
    /// `mmap`: 4 KiB writes (each with msync) per thread and file size.
    pub mmap_writes: usize,
    /// `mmap`: a file this large in MiB (larger than the last-level cache) with random stores.
    pub mmap_large_mib: u64,
    /// `mmap`: a mapping this large in MiB over a file of the smallest `mmap_mib` size (LMDB maps
    /// its whole map size over a smaller file).
    pub mmap_sparse_map_mib: u64,
    /// `fragment`: size of the file read sequentially, in MiB.
    pub seq_read_mib: u64,
    /// `fragment`: size of the file fragmented by 1 KiB overwrites, in MiB.
    pub frag_mib: u64,
    /// `fragment`: random 1 KiB overwrites (each with fsync) that fragment it.
    pub frag_overwrites: usize,
    /// Macro workloads: the factor applied to the papers' file counts.
    pub macro_scale: f64,
    /// Macro workloads: the timed phase of one run.
    pub macro_seconds: f64,
    /// `calls`: calls per thread in each phase.
    pub calls: usize,
    /// Application workloads: operations per phase.
    pub app_ops: usize,
}

impl Sizes {
    /// The defaults: seed 001's sizes where they fit a 2-core machine in minutes.
    pub fn full() -> Sizes {
        Sizes {
            files: vec![100_000],
            writes: 20_000,
            overwrite_sizes: vec![1024, 2048, 4096, 8192, 16384],
            aligned_sizes: vec![4096, 8192, 16384],
            read_sizes: vec![1024, 4096, 16384, 65536, 262_144],
            mmap_mib: vec![1, 4, 8, 12],
            mmap_writes: 20_000,
            mmap_large_mib: 1024,
            mmap_sparse_map_mib: 2048,
            seq_read_mib: 1024,
            frag_mib: 64,
            frag_overwrites: 100_000,
            macro_scale: 0.1,
            macro_seconds: 10.0,
            calls: 1_000_000,
            app_ops: 5_000,
        }
    }

    /// `--quick`: about a minute for three targets and two thread counts here.
    pub fn quick() -> Sizes {
        Sizes {
            files: vec![20_000],
            writes: 5_000,
            overwrite_sizes: vec![1024, 4096, 16384],
            aligned_sizes: vec![4096, 8192, 16384],
            read_sizes: vec![4096, 65536, 262_144],
            mmap_mib: vec![1, 12],
            mmap_writes: 5_000,
            mmap_large_mib: 64,
            mmap_sparse_map_mib: 256,
            seq_read_mib: 128,
            frag_mib: 16,
            frag_overwrites: 10_000,
            macro_scale: 0.01,
            macro_seconds: 3.0,
            calls: 200_000,
            app_ops: 1_000,
        }
    }
}

/// A workload, with its size parameter where runs differ by it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Workload {
    /// Create, rename and unlink `files` files per thread, each thread in its own directory.
    Dirops {
        /// Files per thread.
        files: usize,
    },
    /// Appends, sequential writes, random byte-granular overwrites with fsync, random reads.
    Fileops,
    /// 4 KiB writes into a mapped file with msync after each.
    Mmap,
    /// Sequential 1 MiB reads, and reads of a file fragmented by 1 KiB overwrites.
    Fragment,
    /// A Filebench-equivalent macro workload.
    Macro(filebench::Profile),
    /// The cost of a call that does nothing, on the target's file and on a kernel file.
    Calls,
    /// A real program's workload (`apps`).
    App(apps::App),
}

/// Workload names accepted by `--workload`.
pub const NAMES: [&str; 18] = [
    "dirops",
    "fileops",
    "mmap",
    "fragment",
    "fileserver",
    "fileserver-1k",
    "varmail",
    "varmail-1k",
    "webserver",
    "webproxy",
    "webproxy-depths",
    "calls",
    "sqlite",
    "redis",
    "kv",
    "rocksdb",
    "oltp",
    "tools",
];

/// The directory depths of seed 000 Fig. 3: webproxy's flat directory, then the same files spread
/// over more and more subdirectories.
pub const WEBPROXY_DEPTHS: [f64; 3] = [0.7, 2.1, 3.4];

impl Workload {
    /// The workloads named `name`, one per size where the workload has several.
    pub fn expand(name: &str, sizes: &Sizes) -> Result<Vec<Workload>, String> {
        match name {
            "dirops" => Ok(sizes
                .files
                .iter()
                .map(|&files| Workload::Dirops { files })
                .collect()),
            "fileops" => Ok(vec![Workload::Fileops]),
            "mmap" => Ok(vec![Workload::Mmap]),
            "fragment" => Ok(vec![Workload::Fragment]),
            "calls" => Ok(vec![Workload::Calls]),
            "sqlite" => Ok(vec![Workload::App(apps::App::Sqlite)]),
            "redis" => Ok(vec![Workload::App(apps::App::Redis)]),
            "kv" => Ok(vec![Workload::App(apps::App::Kv)]),
            "rocksdb" => Ok(vec![Workload::App(apps::App::Rocksdb)]),
            "oltp" => Ok(vec![Workload::App(apps::App::Oltp)]),
            "tools" => Ok(vec![Workload::App(apps::App::Tools)]),
            "fileserver" | "fileserver-1k" | "varmail" | "varmail-1k" | "webserver"
            | "webproxy" => Ok(vec![Workload::Macro(macro_profile(
                name,
                sizes.macro_scale,
            ))]),
            "webproxy-depths" => Ok(WEBPROXY_DEPTHS
                .iter()
                .map(|&depth| {
                    let profile = macro_profile("webproxy", sizes.macro_scale);
                    Workload::Macro(filebench::Profile { depth, ..profile })
                })
                .collect()),
            other => Err(format!(
                "unknown workload `{other}` (one of {})",
                NAMES.join(", ")
            )),
        }
    }

    /// The workload's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Dirops { .. } => "dirops",
            Workload::Fileops => "fileops",
            Workload::Mmap => "mmap",
            Workload::Fragment => "fragment",
            Workload::Calls => "calls",
            Workload::App(app) => app.name(),
            Workload::Macro(profile) => profile.name(),
        }
    }

    /// What one run with `threads` threads keeps alive at once (sizes a native image).
    pub fn needs(self, threads: usize, sizes: &Sizes) -> Needs {
        let per_thread = match self {
            Workload::Dirops { files } => Needs {
                names: files as u64 + dirops::WARMUP_FILES as u64 + 4,
                data_bytes: 0,
            },
            Workload::Fileops => fileops::needs(sizes),
            // Each phase's file is removed after it: the largest alive at once, twice over for
            // the blocks an msync writes before its commit frees the ones it replaces.
            Workload::Mmap => Needs {
                names: 2,
                data_bytes: (2 * sizes
                    .mmap_mib
                    .iter()
                    .copied()
                    .chain([sizes.mmap_large_mib])
                    .max()
                    .unwrap_or(1))
                    << 20,
            },
            Workload::Fragment => Needs {
                names: 2,
                data_bytes: (sizes.seq_read_mib + 2 * sizes.frag_mib) << 20,
            },
            Workload::Calls => Needs {
                names: 1,
                data_bytes: 0,
            },
            // The programs' own files (a few MiB); the image is sized by the preload target.
            Workload::App(_) => Needs {
                names: 64,
                data_bytes: 256 << 20,
            },
            // Threads share the fileset, so it does not grow with them.
            Workload::Macro(profile) => return profile.needs(),
        };
        Needs {
            names: per_thread.names * threads as u64,
            data_bytes: per_thread.data_bytes * threads as u64,
        }
    }

    /// Runs the workload once on `target` with `threads` threads.
    pub fn run_once<T: Target>(
        self,
        target: &T,
        threads: usize,
        sizes: &Sizes,
    ) -> io::Result<Vec<Measured>> {
        match self {
            Workload::Dirops { files } => dirops::run_once(target, threads, files),
            Workload::Fileops => fileops::run_once(target, threads, sizes),
            Workload::Mmap => mmap::run_once(target, threads, sizes),
            Workload::Fragment => fragment::run_once(target, threads, sizes),
            Workload::Calls => calls::run_once(target, threads, sizes.calls),
            Workload::App(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "application workloads run programs, not the library's calls",
            )),
            Workload::Macro(profile) => {
                let duration = std::time::Duration::from_secs_f64(sizes.macro_seconds);
                filebench::run_once(target, threads, &profile, duration)
            }
        }
    }
}

/// The profile named `name`: a personality, with the 1 KiB write variants of seed 001.
fn macro_profile(name: &str, scale: f64) -> filebench::Profile {
    use filebench::{Personality, Profile};
    let (personality, io_1k) = match name {
        "fileserver" => (Personality::Fileserver, false),
        "fileserver-1k" => (Personality::Fileserver, true),
        "varmail" => (Personality::Varmail, false),
        "varmail-1k" => (Personality::Varmail, true),
        "webserver" => (Personality::Webserver, false),
        _ => (Personality::Webproxy, false),
    };
    let profile = Profile::new(personality, scale);
    if io_1k {
        Profile {
            io_bytes: 1024,
            ..profile
        }
    } else {
        profile
    }
}

/// A deterministic stream of `n` offsets in `[0, span)` that are multiples of `align`
/// (xorshift64), so every target sees the same ones.
pub fn offsets(n: usize, span: u64, align: u64, seed: u64) -> Vec<u64> {
    assert!(
        span >= align && align > 0,
        "span {span} below align {align}"
    );
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (span / align)) * align
        })
        .collect()
}

/// Fills `[0, bytes)` of `file` with 1 MiB writes and one fsync (untimed setup).
pub fn fill<T: Target>(target: &T, file: &T::File, bytes: u64) -> io::Result<()> {
    let chunk = vec![0x5au8; 1 << 20];
    for offset in (0..bytes).step_by(chunk.len()) {
        let len = (bytes - offset).min(chunk.len() as u64) as usize;
        target.pwrite(file, offset, &chunk[..len])?;
    }
    target.fsync(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_deterministic_aligned_and_in_range() {
        let a = offsets(10_000, 1 << 20, 4096, 7);
        assert_eq!(a, offsets(10_000, 1 << 20, 4096, 7));
        assert_ne!(a, offsets(10_000, 1 << 20, 4096, 8));
        assert!(a.iter().all(|&o| o % 4096 == 0 && o < 1 << 20));
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert_eq!(distinct.len(), 256, "every page of the span is hit");
        let bytes = offsets(1000, 5000, 1, 3);
        assert!(bytes.iter().any(|o| o % 2 == 1), "byte granular");
    }

    #[test]
    fn needs_scale_with_threads() {
        let sizes = Sizes::quick();
        let one = Workload::Fileops.needs(1, &sizes);
        let two = Workload::Fileops.needs(2, &sizes);
        assert_eq!(two.data_bytes, 2 * one.data_bytes);
        assert!(one.data_bytes >= 2 * sizes.writes as u64 * 4096);
    }
}
