//! Filebench-equivalent macro workloads: fileserver, varmail, webserver and webproxy, with the
//! fileset shapes of seed 000 Table I and seed 001 Table II, scaled by one factor.
//!
//! As in Filebench, a fileset is a tree of directories of a mean width holding files whose sizes
//! follow a gamma distribution (shape 1.5) around the mean; a share of the files exists before
//! timing (`prealloc`), the rest are created by the workload. Each thread loops over its
//! personality's flowop sequence until the run's duration is up, and every flowop is timed on its
//! own. Unlike Filebench (seed 002), threads do not share a lock: each thread owns the files whose
//! index is congruent to its number, so no timed operation waits for the harness; the webserver's
//! log file is the one shared file, appended to at offsets reserved with an atomic counter.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::Measured;
use crate::runner::{parallel, Gate, Sample};
use crate::stats::histogram;
use crate::target::{cname, Needs, Target};

/// The webserver's shared log wraps around at this size (Filebench lets it grow without bound,
/// which at native speed would fill memory in seconds).
pub const LOG_CAP_BYTES: u64 = 256 << 20;

/// The four personalities.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Personality {
    /// Home directories: create, write whole, append, read whole, delete, stat.
    Fileserver,
    /// A mail server: delete, create, append + fsync, read whole, append + fsync, read whole.
    Varmail,
    /// Ten whole-file reads, then an append to one shared log.
    Webserver,
    /// Delete, create, append, then five whole-file reads, in a flat directory.
    Webproxy,
}

/// A fileset and its I/O sizes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    /// The personality.
    pub personality: Personality,
    /// Files in the fileset (after scaling).
    pub files: usize,
    /// Mean directory depth (Filebench: ln(files) / ln(mean width)).
    pub depth: f64,
    /// Mean file size in bytes.
    pub mean_file_bytes: u64,
    /// Chunk size of whole-file reads and writes.
    pub io_bytes: u64,
    /// Mean size of an append.
    pub mean_append_bytes: u64,
    /// Percent of the files that exist before timing.
    pub prealloc_percent: u64,
}

impl Profile {
    /// The profile of a personality at `scale` (1.0 = the papers' file counts), with `io_bytes`
    /// overriding the write size where the papers have 1 KiB variants.
    pub fn new(personality: Personality, scale: f64) -> Profile {
        let scaled = |files: f64| ((files * scale).round() as usize).max(50);
        match personality {
            // Seed 000 Table I: 100K files of 128 KiB, depth 3.8, 16 KiB appends.
            Personality::Fileserver => Profile {
                personality,
                files: scaled(100_000.0),
                depth: 3.8,
                mean_file_bytes: 128 << 10,
                io_bytes: 1 << 20,
                mean_append_bytes: 16 << 10,
                prealloc_percent: 80,
            },
            // Seed 001 Table II: 50K files of 16 KiB, 16 KiB I/O; flat (Filebench's width 1M).
            Personality::Varmail => Profile {
                personality,
                files: scaled(50_000.0),
                depth: 0.7,
                mean_file_bytes: 16 << 10,
                io_bytes: 16 << 10,
                mean_append_bytes: 16 << 10,
                prealloc_percent: 80,
            },
            // Seed 000 Table I: 500K files of 32 KiB, depth 2.5, 1 MiB reads, 8 KiB log appends.
            Personality::Webserver => Profile {
                personality,
                files: scaled(500_000.0),
                depth: 2.5,
                mean_file_bytes: 32 << 10,
                io_bytes: 1 << 20,
                mean_append_bytes: 8 << 10,
                prealloc_percent: 100,
            },
            // Seed 000 Table I: 500K files of 32 KiB, depth 0.7, 1 MiB reads, 32 KiB appends.
            Personality::Webproxy => Profile {
                personality,
                files: scaled(500_000.0),
                depth: 0.7,
                mean_file_bytes: 32 << 10,
                io_bytes: 1 << 20,
                mean_append_bytes: 32 << 10,
                prealloc_percent: 80,
            },
        }
    }

    /// The personality's name in reports.
    pub fn name(&self) -> &'static str {
        let small_writes = self.io_bytes <= 1024;
        match self.personality {
            Personality::Fileserver if small_writes => "fileserver-1k",
            Personality::Fileserver => "fileserver",
            Personality::Varmail if small_writes => "varmail-1k",
            Personality::Varmail => "varmail",
            Personality::Webserver => "webserver",
            Personality::Webproxy => "webproxy",
        }
    }

    /// The variant label: files, depth and write size.
    pub fn variant(&self) -> String {
        format!(
            "files={},depth={},io={}",
            self.files, self.depth, self.io_bytes
        )
    }

    /// Mean files per directory.
    pub fn width(&self) -> usize {
        let width = (self.files as f64).powf(1.0 / self.depth).round() as usize;
        width.clamp(2, self.files.max(2))
    }

    /// What a run keeps alive: the fileset, grown by appends (bounded by the duration; twice the
    /// fileset is ample at these speeds for the default durations).
    pub fn needs(&self) -> Needs {
        let dirs = (self.files / self.width() + 1) as u64 * 2;
        Needs {
            names: self.files as u64 + dirs + 16,
            data_bytes: self.files as u64 * self.mean_file_bytes * 3 + LOG_CAP_BYTES + (64 << 20),
        }
    }

    /// The timed flowops, in sequence order (repeats included once, in first-use order).
    pub fn flowops(&self) -> &'static [&'static str] {
        match self.personality {
            Personality::Fileserver => &[
                "create", "write", "close", "open", "append", "read", "delete", "stat",
            ],
            Personality::Varmail => &[
                "delete", "create", "append", "fsync", "close", "open", "read",
            ],
            Personality::Webserver => &["open", "read", "close", "append-log"],
            Personality::Webproxy => &["delete", "create", "append", "close", "open", "read"],
        }
    }
}

/// A deterministic random stream (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Gamma-distributed with `shape` >= 1 and mean `mean` (Marsaglia and Tsang).
    pub fn gamma(&mut self, shape: f64, mean: f64) -> f64 {
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.unit();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * mean / shape;
            }
        }
    }
}

/// One thread's files: names, directories, sizes and which exist.
struct Share {
    names: Vec<std::ffi::CString>,
    dir_of: Vec<usize>,
    sizes: Vec<u64>,
    present: Vec<usize>,
    absent: Vec<usize>,
}

/// Per-flowop timing inside a duration-bound loop.
struct Flowops {
    hists: Vec<Histogram<u64>>,
    counts: Vec<u64>,
}

impl Flowops {
    fn new(n: usize) -> Flowops {
        Flowops {
            hists: (0..n).map(|_| histogram()).collect(),
            counts: vec![0; n],
        }
    }

    fn time<R>(&mut self, k: usize, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        let t0 = Instant::now();
        let result = op()?;
        let ns = t0.elapsed().as_nanos() as u64;
        self.hists[k].saturating_record(ns.max(1));
        self.counts[k] += 1;
        Ok(result)
    }
}

/// Builds the fileset's directory tree (untimed): leaves of `width` files each, under inner
/// directories `width` wide where there are more leaves than that. Returns the leaves.
fn build_tree<T: Target>(target: &T, profile: &Profile) -> io::Result<Vec<T::Dir>> {
    let width = profile.width();
    let leaves = profile.files.div_ceil(width);
    let top = target.mkdir(target.root(), &cname("fileset"))?;
    let mut dirs = Vec::with_capacity(leaves);
    let mut inner: Vec<T::Dir> = Vec::new();
    for leaf in 0..leaves {
        if leaves <= width {
            dirs.push(target.mkdir(&top, &cname(&format!("d{leaf}")))?);
            continue;
        }
        if leaf % width == 0 {
            inner.push(target.mkdir(&top, &cname(&format!("i{}", leaf / width)))?);
        }
        let parent = inner.last().expect("an inner directory exists");
        dirs.push(target.mkdir(parent, &cname(&format!("d{leaf}")))?);
    }
    Ok(dirs)
}

/// Creates this thread's share of the fileset (untimed): the files whose index is congruent to
/// `thread`, `prealloc_percent` of them written with gamma-distributed sizes.
fn build_share<T: Target>(
    target: &T,
    dirs: &[T::Dir],
    profile: &Profile,
    thread: usize,
    threads: usize,
    rng: &mut Rng,
) -> io::Result<Share> {
    let width = profile.width();
    let mine: Vec<usize> = (thread..profile.files).step_by(threads).collect();
    let mut share = Share {
        names: mine.iter().map(|i| cname(&format!("f{i:08}"))).collect(),
        dir_of: mine.iter().map(|i| i / width).collect(),
        sizes: vec![0; mine.len()],
        present: Vec::new(),
        absent: Vec::new(),
    };
    let chunk = vec![0x4bu8; profile.io_bytes as usize];
    for k in 0..mine.len() {
        if rng.below(100) as u64 >= profile.prealloc_percent {
            share.absent.push(k);
            continue;
        }
        let size = rng.gamma(1.5, profile.mean_file_bytes as f64).max(1.0) as u64;
        let file = target.open(&dirs[share.dir_of[k]], &share.names[k], true)?;
        write_whole_at(target, &file, 0, size, &chunk)?;
        target.close(file)?;
        share.sizes[k] = size;
        share.present.push(k);
    }
    Ok(share)
}

fn read_whole<T: Target>(target: &T, file: &T::File, size: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut offset = 0;
    while offset < size {
        let len = (size - offset).min(buf.len() as u64);
        target.pread(file, offset, &mut buf[..len as usize])?;
        offset += len;
    }
    Ok(())
}

/// Runs `profile` for `duration` with `threads` threads; one [`Measured`] per flowop and one for
/// all flowops together (`all`).
pub fn run_once<T: Target>(
    target: &T,
    threads: usize,
    profile: &Profile,
    duration: Duration,
) -> io::Result<Vec<Measured>> {
    let log = match profile.personality {
        Personality::Webserver => Some(target.open(target.root(), &cname("weblog"), true)?),
        _ => None,
    };
    let log_end = AtomicU64::new(0);
    let dirs = build_tree(target, profile)?;
    let per_thread = parallel(threads, |i, gate| {
        let mut rng = Rng::new(0xf11e_be7c ^ i as u64);
        let mut share = build_share(target, &dirs, profile, i, threads, &mut rng)?;
        let mut flow = Flowops::new(profile.flowops().len());
        let mut io = Io {
            chunk: vec![0x2du8; profile.io_bytes as usize],
            buf: vec![0u8; profile.io_bytes as usize],
        };
        let files = Files {
            dirs: &dirs,
            log: &log,
            log_end: &log_end,
        };
        let sequence = |rng: &mut Rng, flow: &mut Flowops| {
            one_sequence(target, profile, &files, &mut share, &mut io, rng, flow)
        };
        let (elapsed_ns, fences) =
            timed_loop(target, gate, duration, sequence, &mut rng, &mut flow)?;
        let mut samples: Vec<Sample> = flow
            .hists
            .into_iter()
            .zip(flow.counts)
            .map(|(hist, ops)| Sample {
                ops,
                elapsed_ns,
                hist,
                flushes: None,
                fences: None,
            })
            .collect();
        let mut all = Sample::combine(&samples);
        all.fences = fences;
        samples.push(all);
        Ok(samples)
    })?;
    if let Some(log) = log {
        target.close(log)?;
    }
    let names = profile.flowops().iter().copied().chain(["all"]);
    Ok(names
        .zip(crate::runner::combine_threads(per_thread))
        .map(|(op, sample)| Measured {
            op: op.into(),
            io_size: profile.io_bytes,
            variant: profile.variant(),
            sample,
        })
        .collect())
}

struct Io {
    chunk: Vec<u8>,
    buf: Vec<u8>,
}

/// Runs `sequence` until `duration` has passed since the gate opened; returns the time taken and
/// the fences issued.
fn timed_loop<T: Target>(
    target: &T,
    gate: &Gate,
    duration: Duration,
    mut sequence: impl FnMut(&mut Rng, &mut Flowops) -> io::Result<()>,
    rng: &mut Rng,
    flow: &mut Flowops,
) -> io::Result<(u64, Option<u64>)> {
    gate.wait()?;
    let before = target.counters();
    let start = Instant::now();
    while start.elapsed() < duration {
        sequence(rng, flow)?;
    }
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let fences = target
        .counters()
        .zip(before)
        .map(|(a, b)| a.since(b).fences);
    Ok((elapsed_ns, fences))
}

/// An append of a random size with the profile's mean (uniform in [1, 2 x mean]).
fn append_len(profile: &Profile, rng: &mut Rng) -> u64 {
    1 + rng.below((2 * profile.mean_append_bytes) as usize) as u64
}

/// What all threads share: the fileset's directories and the webserver's log.
struct Files<'a, T: Target> {
    dirs: &'a [T::Dir],
    log: &'a Option<T::File>,
    log_end: &'a AtomicU64,
}

/// Opens a random existing file of the share and reads it whole (the `open` and `read` flowops);
/// returns its index and the open handle.
fn open_and_read<T: Target>(
    target: &T,
    files: &Files<'_, T>,
    share: &Share,
    buf: &mut [u8],
    rng: &mut Rng,
    flow: &mut Flowops,
    (open, read): (usize, usize),
) -> io::Result<(usize, T::File)> {
    let f = share.present[rng.below(share.present.len())];
    let dir = &files.dirs[share.dir_of[f]];
    let file = flow.time(open, || target.open(dir, &share.names[f], false))?;
    flow.time(read, || read_whole(target, &file, share.sizes[f], buf))?;
    Ok((f, file))
}

/// Runs the personality's flowop sequence once, timing each flowop.
fn one_sequence<T: Target>(
    target: &T,
    profile: &Profile,
    files: &Files<'_, T>,
    share: &mut Share,
    io: &mut Io,
    rng: &mut Rng,
    flow: &mut Flowops,
) -> io::Result<()> {
    let ops = profile.flowops();
    let k = |name: &str| {
        ops.iter()
            .position(|o| *o == name)
            .expect("a flowop of this profile")
    };
    let pick = |list: &[usize], rng: &mut Rng| list[rng.below(list.len())];
    match profile.personality {
        Personality::Fileserver => {
            if share.absent.is_empty() || share.present.is_empty() {
                return Ok(());
            }
            let new = take(&mut share.absent, rng);
            let dir = &files.dirs[share.dir_of[new]];
            let file = flow.time(k("create"), || target.open(dir, &share.names[new], true))?;
            let size = rng.gamma(1.5, profile.mean_file_bytes as f64).max(1.0) as u64;
            flow.time(k("write"), || {
                write_whole_at(target, &file, 0, size, &io.chunk)
            })?;
            flow.time(k("close"), || target.close(file))?;
            share.sizes[new] = size;
            share.present.push(new);
            let f = pick(&share.present, rng);
            let dir = &files.dirs[share.dir_of[f]];
            let file = flow.time(k("open"), || target.open(dir, &share.names[f], false))?;
            let len = append_len(profile, rng);
            let at = share.sizes[f];
            flow.time(k("append"), || {
                write_whole_at(target, &file, at, len, &io.chunk)
            })?;
            share.sizes[f] += len;
            flow.time(k("close"), || target.close(file))?;
            let reading = (k("open"), k("read"));
            let (_, file) = open_and_read(target, files, share, &mut io.buf, rng, flow, reading)?;
            flow.time(k("close"), || target.close(file))?;
            let gone = take(&mut share.present, rng);
            let dir = &files.dirs[share.dir_of[gone]];
            flow.time(k("delete"), || target.unlink(dir, &share.names[gone]))?;
            share.absent.push(gone);
            let f = pick(&share.present, rng);
            let dir = &files.dirs[share.dir_of[f]];
            flow.time(k("stat"), || target.stat(dir, &share.names[f]))?;
        }
        Personality::Varmail | Personality::Webproxy => {
            if share.present.len() < 2 {
                return Ok(());
            }
            let gone = take(&mut share.present, rng);
            let dir = &files.dirs[share.dir_of[gone]];
            flow.time(k("delete"), || target.unlink(dir, &share.names[gone]))?;
            share.absent.push(gone);
            let new = take(&mut share.absent, rng);
            let dir = &files.dirs[share.dir_of[new]];
            let file = flow.time(k("create"), || target.open(dir, &share.names[new], true))?;
            let len = append_len(profile, rng);
            flow.time(k("append"), || {
                write_whole_at(target, &file, 0, len, &io.chunk)
            })?;
            share.sizes[new] = len;
            let varmail = profile.personality == Personality::Varmail;
            if varmail {
                flow.time(k("fsync"), || target.fsync(&file))?;
            }
            flow.time(k("close"), || target.close(file))?;
            share.present.push(new);
            let reads = if varmail { 2 } else { 5 };
            for round in 0..reads {
                let reading = (k("open"), k("read"));
                let (f, file) =
                    open_and_read(target, files, share, &mut io.buf, rng, flow, reading)?;
                if varmail && round == 0 {
                    let len = append_len(profile, rng);
                    let at = share.sizes[f];
                    flow.time(k("append"), || {
                        write_whole_at(target, &file, at, len, &io.chunk)
                    })?;
                    share.sizes[f] += len;
                    flow.time(k("fsync"), || target.fsync(&file))?;
                }
                flow.time(k("close"), || target.close(file))?;
            }
        }
        Personality::Webserver => {
            for _ in 0..10 {
                let reading = (k("open"), k("read"));
                let (_, file) =
                    open_and_read(target, files, share, &mut io.buf, rng, flow, reading)?;
                flow.time(k("close"), || target.close(file))?;
            }
            let log = files.log.as_ref().expect("webserver has a log");
            let len = append_len(profile, rng);
            let reserved = files.log_end.fetch_add(len, Ordering::Relaxed);
            let at = reserved % (LOG_CAP_BYTES - 2 * profile.mean_append_bytes);
            flow.time(k("append-log"), || {
                write_whole_at(target, log, at, len, &io.chunk)
            })?;
        }
    }
    Ok(())
}

fn write_whole_at<T: Target>(
    target: &T,
    file: &T::File,
    at: u64,
    len: u64,
    chunk: &[u8],
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len() as u64);
        target.pwrite(file, at + done, &chunk[..n as usize])?;
        done += n;
    }
    Ok(())
}

/// Removes and returns a random element of `list`.
fn take(list: &mut Vec<usize>, rng: &mut Rng) -> usize {
    let i = rng.below(list.len());
    list.swap_remove(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_sizes_have_the_asked_mean() {
        let mut rng = Rng::new(1);
        let n = 200_000;
        let mean = (0..n).map(|_| rng.gamma(1.5, 16384.0)).sum::<f64>() / n as f64;
        assert!((mean - 16384.0).abs() / 16384.0 < 0.02, "mean {mean}");
    }

    #[test]
    fn widths_follow_depth() {
        let flat = Profile::new(Personality::Webproxy, 0.1);
        assert_eq!(flat.files, 50_000);
        assert_eq!(
            flat.width(),
            50_000,
            "depth 0.7 puts every file in one directory"
        );
        let deep = Profile { depth: 3.4, ..flat };
        assert_eq!(deep.width(), 24, "50,000^(1/3.4)");
        assert_eq!(Profile::new(Personality::Fileserver, 0.1).width(), 11);
    }
}
