//! `fileops`: appends and byte-granular overwrites with fsync after each, sequential reads, and
//! reads of a fragmented file (seed 001, IV-B, Fig. 8 and 9).
//!
//! Every offset and buffer is prepared before timing. Write phases time `pwrite + fsync` as one
//! operation; read phases time each `pread` and report bandwidth.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::namespace::{Fs, Owner, ROOT_INO};
use nosefs_core::pmem::{counters, Counters};

use crate::stats::{histogram, median, spread};
use crate::target::BenchImage;

/// A file to write and read, on some target.
pub trait FileTarget {
    /// Label in reports.
    fn name(&self) -> String;
    /// Writes `data` at `offset`.
    fn pwrite(&self, offset: u64, data: &[u8]);
    /// Makes the file durable.
    fn fsync(&self);
    /// Reads `buf.len()` bytes at `offset`.
    fn pread(&self, offset: u64, buf: &mut [u8]);
    /// This thread's flush and fence counters, where the target has them.
    fn counters(&self) -> Option<Counters> {
        None
    }
}

/// One file on the native library, in a fresh image removed on drop.
#[derive(Debug)]
pub struct NativeFile {
    image: BenchImage,
    ino: u64,
}

impl NativeFile {
    /// Formats an image of `data_bytes` plus metadata room in `dir` and creates one file.
    pub fn new(dir: &Path, data_bytes: u64) -> nosefs_core::Result<NativeFile> {
        let path = dir.join(format!("nosefs-fileops-{}.img", std::process::id()));
        let params = MkfsParams {
            image_bytes: (data_bytes + data_bytes / 8 + (64 << 20)).next_multiple_of(1 << 20),
            pinodes: Some(1024),
            extents: Some(1 << 20),
            ..MkfsParams::default()
        };
        let image = BenchImage::create(path, &params)?;
        let ino = image
            .fs()
            .create(ROOT_INO, b"bench", 0o644, Owner::default(), true)?
            .ino;
        Ok(NativeFile { image, ino })
    }

    fn fs(&self) -> &Fs {
        self.image.fs()
    }

    /// Pieces (extents and pending writes) of the file: its fragmentation.
    pub fn pieces(&self) -> usize {
        self.fs().file_pieces(self.ino).expect("the file exists")
    }
}

impl FileTarget for NativeFile {
    fn name(&self) -> String {
        "nosefs".into()
    }
    fn pwrite(&self, offset: u64, data: &[u8]) {
        self.fs().write(self.ino, offset, data).expect("write");
    }
    fn fsync(&self) {
        self.fs().fsync(self.ino).expect("fsync");
    }
    fn pread(&self, offset: u64, buf: &mut [u8]) {
        self.fs().read(self.ino, offset, buf).expect("read");
    }
    fn counters(&self) -> Option<Counters> {
        Some(counters())
    }
}

/// One file in a directory, through system calls; removed on drop.
#[derive(Debug)]
pub struct SyscallFile {
    label: String,
    file: File,
    path: PathBuf,
}

impl SyscallFile {
    /// Creates the file in `dir`.
    pub fn new(label: &str, dir: &Path) -> std::io::Result<SyscallFile> {
        let path = dir.join(format!("nosefs-fileops-{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(SyscallFile {
            label: label.into(),
            file,
            path,
        })
    }
}

impl Drop for SyscallFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl FileTarget for SyscallFile {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn pwrite(&self, offset: u64, data: &[u8]) {
        self.file.write_all_at(data, offset).expect("pwrite");
    }
    fn fsync(&self) {
        self.file.sync_all().expect("fsync");
    }
    fn pread(&self, offset: u64, buf: &mut [u8]) {
        self.file.read_exact_at(buf, offset).expect("pread");
    }
}

/// Sizes of one fileops run.
#[derive(Debug, Clone, Copy)]
pub struct FileopsConfig {
    /// Operations per write phase.
    pub writes: usize,
    /// Size of the file sequential reads go through, in bytes.
    pub read_file_bytes: u64,
    /// Size of the file fragmented by 1 KiB overwrites, in bytes.
    pub frag_file_bytes: u64,
    /// 1 KiB overwrites (each with fsync) that fragment it.
    pub frag_overwrites: usize,
}

/// One phase's result.
#[derive(Debug, Clone)]
pub struct FileResult {
    /// Target name.
    pub target: String,
    /// Phase name.
    pub op: String,
    /// Bytes per operation.
    pub io_size: usize,
    /// Median over runs of operations per second.
    pub ops_per_sec: f64,
    /// Median over runs of bytes per second.
    pub bytes_per_sec: f64,
    /// (max - min) / median of the per-run rates.
    pub spread: f64,
    /// Latency percentiles over all runs, in ns.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Flushes per operation, where counted.
    pub flushes_per_op: Option<f64>,
    /// Fences per operation, where counted.
    pub fences_per_op: Option<f64>,
    /// Runs measured.
    pub runs: usize,
}

/// A deterministic stream of offsets (xorshift), so every target sees the same ones.
fn offsets(n: usize, span: u64, align: u64, seed: u64) -> Vec<u64> {
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

struct Sample {
    rate: f64,
    hist: hdrhistogram::Histogram<u64>,
    flushes: Option<u64>,
    fences: Option<u64>,
}

/// Times `ops` operations (write + fsync, or a read), each into the histogram.
fn timed(target: &dyn FileTarget, ops: &[u64], io: usize, write: bool) -> Sample {
    let data = vec![0xa5u8; io];
    let mut buf = vec![0u8; io];
    let mut hist = histogram();
    let before = target.counters();
    let start = Instant::now();
    for &offset in ops {
        let t0 = Instant::now();
        if write {
            target.pwrite(offset, &data);
            target.fsync();
        } else {
            target.pread(offset, &mut buf);
        }
        hist.saturating_record((t0.elapsed().as_nanos() as u64).max(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let spent = target.counters().zip(before).map(|(a, b)| a.since(b));
    Sample {
        rate: ops.len() as f64 / elapsed,
        hist,
        flushes: spent.map(|c| c.flushes),
        fences: spent.map(|c| c.fences),
    }
}

/// Fills `[0, bytes)` with 1 MiB writes and one fsync (untimed setup).
fn fill(target: &dyn FileTarget, bytes: u64) {
    let chunk = vec![0x5au8; 1 << 20];
    for offset in (0..bytes).step_by(chunk.len()) {
        target.pwrite(offset, &chunk[..(bytes - offset).min(1 << 20) as usize]);
    }
    target.fsync();
}

/// Runs every phase on targets made fresh by `make` for each of `runs` runs.
pub fn run<T: FileTarget>(
    make: impl Fn() -> T,
    config: FileopsConfig,
    runs: usize,
) -> Vec<FileResult> {
    let mut samples: Vec<(String, usize, Vec<Sample>)> = Vec::new();
    let mut name = String::new();
    let record =
        |op: &str, io: usize, s: Sample, samples: &mut Vec<(String, usize, Vec<Sample>)>| {
            match samples.iter_mut().find(|(o, i, _)| o == op && *i == io) {
                Some((_, _, v)) => v.push(s),
                None => samples.push((op.to_string(), io, vec![s])),
            }
        };
    for run in 0..runs {
        let seed = 0x9e37_79b9 + run as u64;
        let target = make();
        name = target.name();
        let n = config.writes;
        let appends: Vec<u64> = (0..n as u64).map(|i| i * 4096).collect();
        record(
            "append+fsync",
            4096,
            timed(&target, &appends, 4096, true),
            &mut samples,
        );
        let span = n as u64 * 4096;
        let aligned = offsets(n, span - 4096, 4096, seed);
        record(
            "overwrite+fsync",
            4096,
            timed(&target, &aligned, 4096, true),
            &mut samples,
        );
        let bytes = offsets(n, span - 1024, 1, seed ^ 0xff);
        record(
            "overwrite+fsync",
            1024,
            timed(&target, &bytes, 1024, true),
            &mut samples,
        );
        drop(target);

        let target = make();
        fill(&target, config.read_file_bytes);
        let reads: Vec<u64> = (0..config.read_file_bytes / (1 << 20))
            .map(|i| i << 20)
            .collect();
        record(
            "read seq",
            1 << 20,
            timed(&target, &reads, 1 << 20, false),
            &mut samples,
        );
        drop(target);

        let target = make();
        fill(&target, config.frag_file_bytes);
        let reads: Vec<u64> = (0..config.frag_file_bytes / (1 << 20))
            .map(|i| i << 20)
            .collect();
        record(
            "read fresh",
            1 << 20,
            timed(&target, &reads, 1 << 20, false),
            &mut samples,
        );
        let scattered = offsets(
            config.frag_overwrites,
            config.frag_file_bytes - 1024,
            1,
            seed ^ 0xabc,
        );
        timed(&target, &scattered, 1024, true);
        record(
            "read fragmented",
            1 << 20,
            timed(&target, &reads, 1 << 20, false),
            &mut samples,
        );
    }
    samples
        .into_iter()
        .map(|(op, io, s)| summarize(&name, &op, io, &s))
        .collect()
}

fn summarize(target: &str, op: &str, io: usize, samples: &[Sample]) -> FileResult {
    let rates: Vec<f64> = samples.iter().map(|s| s.rate).collect();
    let mut hist = histogram();
    samples
        .iter()
        .for_each(|s| hist.add(&s.hist).expect("same bounds"));
    let ops = hist.len() as f64;
    let per_op = |f: fn(&Sample) -> Option<u64>| {
        samples
            .iter()
            .map(f)
            .sum::<Option<u64>>()
            .map(|t| t as f64 / ops)
    };
    let ops_per_sec = median(&rates);
    FileResult {
        target: target.into(),
        op: op.into(),
        io_size: io,
        ops_per_sec,
        bytes_per_sec: ops_per_sec * io as f64,
        spread: spread(&rates),
        p50_ns: hist.value_at_quantile(0.50),
        p99_ns: hist.value_at_quantile(0.99),
        p999_ns: hist.value_at_quantile(0.999),
        flushes_per_op: per_op(|s| s.flushes),
        fences_per_op: per_op(|s| s.fences),
        runs: samples.len(),
    }
}

/// Memory bandwidth of sequential 1 MiB copies through a buffer of `bytes`, in bytes per second
/// (median of 3): the ceiling for reads that copy from (persistent) memory.
pub fn memcpy_bytes_per_sec(bytes: u64) -> f64 {
    let source = vec![0x11u8; bytes as usize];
    let mut dest = vec![0u8; 1 << 20];
    let rates: Vec<f64> = (0..3)
        .map(|_| {
            let start = Instant::now();
            for chunk in source.chunks(1 << 20) {
                dest[..chunk.len()].copy_from_slice(chunk);
                std::hint::black_box(&dest);
            }
            bytes as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    median(&rates)
}
