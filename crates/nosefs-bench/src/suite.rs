//! A whole benchmark run: every target side by side on every workload, thread count and run.
//!
//! All targets are prepared (scratch mounts made) first; then for each workload and thread count
//! the runs interleave the targets (run 1 on every target, then run 2, ...), so that drift on a
//! shared, noisy machine lands on all targets alike. A target that cannot run here, or a workload
//! it does not support, is reported as skipped with the reason, never as a failure of the run.

use std::io;
use std::path::PathBuf;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::runner::parallel;
use crate::scratch::ScratchMount;
use crate::stats::{histogram, median, spread};
use crate::target::{Native, Syscalls, TargetSpec};
use crate::workload::{fragment, Measured, Sizes, Workload};

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Targets in report order; the first is the baseline of the ratio column.
    pub targets: Vec<TargetSpec>,
    /// Workloads (dirops once per file count).
    pub workloads: Vec<Workload>,
    /// Thread counts to sweep.
    pub threads: Vec<usize>,
    /// Runs per (target, workload, threads).
    pub runs: usize,
    /// Workload sizes.
    pub sizes: Sizes,
    /// Where native images and ramdisk backing files go.
    pub image_dir: PathBuf,
    /// Size of each ramdisk (sparse; only what is written takes memory).
    pub ramdisk_bytes: u64,
    /// The preload shim library, for the `nosefs-preload` target.
    pub preload_lib: Option<PathBuf>,
    /// Hold the CPU wake-up latency at 0 while the run lasts ([`crate::wakeup`]).
    pub hold_wakeup_latency: bool,
}

/// One (target, workload, op, variant, threads, io_size) over all runs.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Target label.
    pub target: String,
    /// Workload name.
    pub workload: String,
    /// Operation.
    pub op: String,
    /// Parameters beyond op and io_size (e.g. `files=100000`), empty if none.
    pub variant: String,
    /// Threads.
    pub threads: usize,
    /// Bytes per operation (0 for metadata operations).
    pub io_size: u64,
    /// Median over runs of operations per second (all threads together).
    pub ops_per_sec: f64,
    /// Median over runs of MB/s (10^6 bytes), 0 for metadata operations.
    pub mb_per_sec: f64,
    /// (max - min) / median of the per-run rates.
    pub spread: f64,
    /// Latency percentiles over every operation of every run and thread, in ns.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Mean latency in ns.
    pub mean_ns: f64,
    /// Cache lines written back per operation, where the target counts them.
    pub flushes_per_op: Option<f64>,
    /// Fences per operation, where the target counts them.
    pub fences_per_op: Option<f64>,
    /// Runs measured.
    pub runs: usize,
    /// The merged latency histogram (for plots; not in the JSON).
    #[serde(skip)]
    pub hist: Histogram<u64>,
}

impl Record {
    /// Whether `other` measures the same thing on (possibly) another target.
    pub fn same_point(&self, other: &Record) -> bool {
        self.workload == other.workload
            && self.op == other.op
            && self.variant == other.variant
            && self.threads == other.threads
            && self.io_size == other.io_size
    }
}

#[cfg(test)]
impl Record {
    /// A record with the given identity, rate and latency histogram, zeros elsewhere (for tests).
    pub(crate) fn for_test(
        (target, workload, op, variant): (&str, &str, &str, &str),
        threads: usize,
        ops_per_sec: f64,
        hist: Histogram<u64>,
    ) -> Record {
        Record {
            target: target.into(),
            workload: workload.into(),
            op: op.into(),
            variant: variant.into(),
            threads,
            io_size: 0,
            ops_per_sec,
            mb_per_sec: 0.0,
            spread: 0.0,
            p50_ns: 0,
            p99_ns: 0,
            p999_ns: 0,
            mean_ns: 0.0,
            flushes_per_op: None,
            fences_per_op: None,
            runs: 1,
            hist,
        }
    }
}

/// Something that did not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Target label.
    pub target: String,
    /// Workload, or `None` when the whole target was unavailable.
    pub workload: Option<String>,
    /// Thread count, where it applies.
    pub threads: Option<usize>,
    /// Why.
    pub reason: String,
}

/// The harness's own cost, measured in the same run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HarnessCost {
    /// Mean cost of timing an empty operation (two clock reads, a histogram record), in ns.
    pub empty_op_ns: f64,
    /// Mean time of a 4 KiB pwrite to a file in /dev/shm (tmpfs), in ns.
    pub tmpfs_pwrite_4k_ns: f64,
}

impl HarnessCost {
    /// The harness cost as a fraction of a tmpfs 4 KiB pwrite (the target: under 5%).
    pub fn fraction(&self) -> f64 {
        self.empty_op_ns / self.tmpfs_pwrite_4k_ns
    }
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Results, in target order within each workload.
    pub records: Vec<Record>,
    /// What did not run.
    pub skipped: Vec<Skipped>,
    /// The harness's own cost.
    pub harness: HarnessCost,
    /// Memory copy bandwidth (when the `fragment` workload ran), bytes per second.
    pub memcpy_bytes_per_sec: Option<f64>,
    /// Whether idle CPUs could halt during the run, and why ([`crate::wakeup`]).
    pub wakeup_latency: String,
}

enum Prepared {
    Native {
        place: PathBuf,
        mode: crate::target::NativeMode,
    },
    Floor {
        place: PathBuf,
    },
    Preload {
        place: PathBuf,
        lib: PathBuf,
    },
    Client {
        mount: ScratchMount,
        lib: PathBuf,
    },
    Dir {
        path: PathBuf,
        mount: Option<ScratchMount>,
    },
}

fn prepare(spec: &TargetSpec, plan: &Plan) -> Result<Prepared, String> {
    match spec {
        TargetSpec::Native { place, mode } => {
            let place = place.clone().unwrap_or_else(|| plan.image_dir.clone());
            if !place.exists() {
                return Err(format!("{} does not exist", place.display()));
            }
            Ok(Prepared::Native { place, mode: *mode })
        }
        TargetSpec::Floor => {
            let place = plan.image_dir.clone();
            if !place.is_dir() {
                return Err(format!("{} is not a directory", place.display()));
            }
            Ok(Prepared::Floor { place })
        }
        TargetSpec::Preload => {
            let place = plan.image_dir.clone();
            if !place.is_dir() {
                return Err(format!("{} is not a directory", place.display()));
            }
            let lib = plan.preload_lib.clone().ok_or_else(|| {
                "the preload shim library was not found (build it with `cargo build -p nosefs-preload`)".to_string()
            })?;
            Ok(Prepared::Preload { place, lib })
        }
        TargetSpec::Client => {
            let lib = plan.preload_lib.clone().ok_or_else(|| {
                "the preload shim library was not found (build it with `cargo build -p nosefs-preload`)".to_string()
            })?;
            let workers = plan.threads.iter().copied().max().unwrap_or(1).max(2);
            let mount =
                ScratchMount::nosefs_fuse(&plan.image_dir, plan.ramdisk_bytes, workers, true)?;
            Ok(Prepared::Client { mount, lib })
        }
        TargetSpec::Dir(path) => {
            if !path.is_dir() {
                return Err(format!("{} is not a directory", path.display()));
            }
            Ok(Prepared::Dir {
                path: path.clone(),
                mount: None,
            })
        }
        TargetSpec::Fuse => {
            let workers = plan.threads.iter().copied().max().unwrap_or(1).max(2);
            let mount =
                ScratchMount::nosefs_fuse(&plan.image_dir, plan.ramdisk_bytes, workers, false)?;
            Ok(Prepared::Dir {
                path: mount.path().to_path_buf(),
                mount: Some(mount),
            })
        }
        TargetSpec::Tmpfs => {
            let mount = ScratchMount::tmpfs(plan.ramdisk_bytes)?;
            Ok(Prepared::Dir {
                path: mount.path().to_path_buf(),
                mount: Some(mount),
            })
        }
        TargetSpec::Ramdisk(kind) => {
            let mount = ScratchMount::ramdisk(*kind, &plan.image_dir, plan.ramdisk_bytes)?;
            Ok(Prepared::Dir {
                path: mount.path().to_path_buf(),
                mount: Some(mount),
            })
        }
    }
}

fn run_unit(
    prepared: &Prepared,
    workload: Workload,
    threads: usize,
    sizes: &Sizes,
) -> io::Result<Vec<Measured>> {
    if let Workload::App(app) = workload {
        return run_app(prepared, app, threads, sizes);
    }
    match prepared {
        Prepared::Native { place, mode } => {
            let needs = workload.needs(threads, sizes);
            let target = Native::new(place, needs, *mode)
                .map_err(|e| io::Error::other(format!("cannot prepare an image: {e}")))?;
            workload.run_once(&target, threads, sizes)
        }
        Prepared::Floor { place } => crate::floor::run_once(place, workload, threads, sizes),
        Prepared::Preload { place, lib } => {
            crate::preload::run_once(place, lib, workload, threads, sizes)
        }
        Prepared::Client { mount, lib } => {
            crate::preload::run_on_daemon(mount.path(), lib, workload, threads, sizes)
        }
        Prepared::Dir { path, mount } => {
            let measured = {
                let target = Syscalls::new(path)?;
                workload.run_once(&target, threads, sizes)
            };
            // The run's directory is gone now; hand its blocks' memory back before the next run.
            if let Some(mount) = mount {
                mount.trim().map_err(io::Error::other)?;
            }
            measured
        }
    }
}

/// One run of an application workload: its programs on the target's directory, or under the
/// shim (a fresh embedded image per run for `nosefs-preload`, as `nosefs run` maps it).
fn run_app(
    prepared: &Prepared,
    app: crate::workload::apps::App,
    threads: usize,
    sizes: &Sizes,
) -> io::Result<Vec<Measured>> {
    use crate::cleanup::{self, Undo};
    use crate::workload::apps::{run_once, Place, Shim};
    let unsupported = |what: &str| {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("application workloads run programs: {what}"),
        ))
    };
    match prepared {
        Prepared::Native { .. } => unsupported(
            "the native library has none (nosefs-preload and nosefs-client run them on noseFS)",
        ),
        Prepared::Floor { .. } => unsupported("the floor replays the library's calls only"),
        Prepared::Dir { path, mount } => {
            let dir = path.join("app");
            std::fs::create_dir_all(&dir)?;
            let place = Place {
                dir: dir.clone(),
                shim: None,
            };
            let result = run_once(app, &place, threads, sizes.app_ops);
            let _ = std::fs::remove_dir_all(&dir);
            if let Some(mount) = mount {
                mount.trim().map_err(io::Error::other)?;
            }
            result
        }
        Prepared::Client { mount, lib } => {
            let dir = mount.path().join("app");
            std::fs::create_dir_all(&dir)?;
            let place = Place {
                dir: dir.clone(),
                shim: Some(Shim {
                    lib: lib.clone(),
                    at: mount.path().to_path_buf(),
                    image: None,
                }),
            };
            let result = run_once(app, &place, threads, sizes.app_ops);
            let _ = std::fs::remove_dir_all(&dir);
            result
        }
        Prepared::Preload { place, lib } => {
            let id = format!("nosefs-bench-app-{}", std::process::id());
            let image = place.join(format!("{id}.img"));
            let prefix = place.join(format!("{id}.d"));
            let _image_undo = cleanup::register(Undo::RemoveFile(image.clone()));
            let _prefix_undo = cleanup::register(Undo::RemoveTree(prefix.clone()));
            let result = (|| {
                let params = crate::target::params_for(Workload::App(app).needs(1, sizes));
                nosefs_core::mkfs::mkfs(&image, &params)
                    .map_err(|e| io::Error::other(format!("cannot prepare an image: {e}")))?;
                std::fs::create_dir_all(&prefix)?;
                let place = Place {
                    dir: prefix.clone(),
                    shim: Some(Shim {
                        lib: lib.clone(),
                        at: prefix.clone(),
                        image: Some(image.clone()),
                    }),
                };
                run_once(app, &place, threads, sizes.app_ops)
            })();
            let _ = std::fs::remove_file(&image);
            let _ = std::fs::remove_dir_all(&prefix);
            result
        }
    }
}

/// Runs the plan, showing progress on stderr.
pub fn run(plan: &Plan) -> Outcome {
    let wakeup = if plan.hold_wakeup_latency {
        crate::wakeup::WakeupLatency::hold()
    } else {
        crate::wakeup::WakeupLatency::not_held()
    };
    let mut skipped = Vec::new();
    let mut prepared: Vec<(String, Prepared)> = Vec::new();
    for spec in &plan.targets {
        match prepare(spec, plan) {
            Ok(p) => prepared.push((spec.label(), p)),
            Err(reason) => skipped.push(Skipped {
                target: spec.label(),
                workload: None,
                threads: None,
                reason,
            }),
        }
    }
    let units = plan.workloads.len() * plan.threads.len() * plan.runs * prepared.len();
    let bar = ProgressBar::new(units as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut records = Vec::new();
    for &workload in &plan.workloads {
        for &threads in &plan.threads {
            let mut runs: Vec<Vec<Vec<Measured>>> = vec![Vec::new(); prepared.len()];
            let mut failed: Vec<Option<String>> = vec![None; prepared.len()];
            for run in 0..plan.runs {
                for (k, (label, target)) in prepared.iter().enumerate() {
                    bar.set_message(format!(
                        "{} on {label}, {threads} thread(s), run {}/{}",
                        workload.name(),
                        run + 1,
                        plan.runs
                    ));
                    if failed[k].is_none() {
                        match run_unit(target, workload, threads, &plan.sizes) {
                            Ok(measured) => runs[k].push(measured),
                            Err(e) => failed[k] = Some(e.to_string()),
                        }
                    }
                    bar.inc(1);
                }
            }
            for (k, (label, _)) in prepared.iter().enumerate() {
                match &failed[k] {
                    Some(reason) => skipped.push(Skipped {
                        target: label.clone(),
                        workload: Some(workload.name().into()),
                        threads: Some(threads),
                        reason: reason.clone(),
                    }),
                    None => records.extend(summarize(label, workload, threads, &runs[k])),
                }
            }
        }
    }
    bar.finish_and_clear();
    let memcpy_bytes_per_sec = plan
        .workloads
        .contains(&Workload::Fragment)
        .then(|| fragment::memcpy_bytes_per_sec((plan.sizes.seq_read_mib << 20).min(1 << 30)));
    Outcome {
        records,
        skipped,
        harness: harness_cost(),
        memcpy_bytes_per_sec,
        wakeup_latency: wakeup.describe(),
    }
}

/// One record per phase from the runs of one (target, workload, threads).
fn summarize(
    label: &str,
    workload: Workload,
    threads: usize,
    runs: &[Vec<Measured>],
) -> Vec<Record> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|phase| {
            let of_phase: Vec<&Measured> = runs.iter().map(|r| &r[phase]).collect();
            let m = of_phase[0];
            let rates: Vec<f64> = of_phase.iter().map(|m| m.sample.rate()).collect();
            let mut hist = histogram();
            for m in &of_phase {
                hist.add(&m.sample.hist)
                    .expect("histograms share their bounds");
            }
            let ops: u64 = of_phase.iter().map(|m| m.sample.ops).sum();
            let per_op = |f: fn(&Measured) -> Option<u64>| {
                of_phase
                    .iter()
                    .map(|m| f(m))
                    .sum::<Option<u64>>()
                    .map(|total| total as f64 / ops.max(1) as f64)
            };
            let ops_per_sec = median(&rates);
            Record {
                target: label.into(),
                workload: workload.name().into(),
                op: m.op.clone(),
                variant: m.variant.clone(),
                threads,
                io_size: m.io_size,
                ops_per_sec,
                // A macro workload's flowops move varying amounts; its io_size is the chunk size.
                mb_per_sec: match workload {
                    Workload::Macro(_) => 0.0,
                    _ => ops_per_sec * m.io_size as f64 / 1e6,
                },
                spread: spread(&rates),
                p50_ns: hist.value_at_quantile(0.50),
                p99_ns: hist.value_at_quantile(0.99),
                p999_ns: hist.value_at_quantile(0.999),
                mean_ns: hist.mean(),
                flushes_per_op: per_op(|m| m.sample.flushes),
                fences_per_op: per_op(|m| m.sample.fences),
                runs: of_phase.len(),
                hist,
            }
        })
        .collect()
}

/// Measures the harness's cost per timed operation (an empty operation through the same timing
/// code, median of 5 rounds of 100,000) and a tmpfs 4 KiB pwrite to compare it with.
pub fn harness_cost() -> HarnessCost {
    let empty: Vec<f64> = (0..5)
        .map(|_| {
            let samples = parallel(1, |_, gate| {
                Ok(vec![gate.timed(&|| None, 100_000, |_| Ok(()))?])
            })
            .expect("an empty operation cannot fail");
            samples[0][0].elapsed_ns as f64 / 100_000.0
        })
        .collect();
    HarnessCost {
        empty_op_ns: median(&empty),
        tmpfs_pwrite_4k_ns: tmpfs_pwrite_ns().unwrap_or(f64::NAN),
    }
}

fn tmpfs_pwrite_ns() -> io::Result<f64> {
    use std::os::unix::fs::FileExt;
    let path = PathBuf::from(format!(
        "/dev/shm/nosefs-bench-{}-pwrite",
        std::process::id()
    ));
    let _guard = crate::cleanup::register(crate::cleanup::Undo::RemoveFile(path.clone()));
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let block = [0x42u8; 4096];
    let rounds: io::Result<Vec<f64>> = (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            for k in 0..20_000u64 {
                file.write_all_at(&block, (k % 4096) * 4096)?;
            }
            Ok(start.elapsed().as_nanos() as f64 / 20_000.0)
        })
        .collect();
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(median(&rounds?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Sample;

    fn measured(ops: u64, elapsed_ns: u64, latency_ns: u64, fences: u64) -> Measured {
        let mut hist = histogram();
        for _ in 0..ops {
            hist.record(latency_ns).unwrap();
        }
        Measured {
            op: "create".into(),
            io_size: 0,
            variant: "files=10".into(),
            sample: Sample {
                ops,
                elapsed_ns,
                hist,
                flushes: None,
                fences: Some(fences),
            },
        }
    }

    #[test]
    fn runs_summarize_to_median_spread_merged_percentiles_and_per_op_counts() {
        // Rates 100, 200 and 400 ops/s; latencies 1, 2 and 4 us.
        let runs = vec![
            vec![measured(100, 1_000_000_000, 1_000, 300)],
            vec![measured(100, 500_000_000, 2_000, 300)],
            vec![measured(100, 250_000_000, 4_000, 300)],
        ];
        let records = summarize("t", Workload::Dirops { files: 10 }, 2, &runs);
        assert_eq!(records.len(), 1);
        let r = &records[0];
        assert_eq!(r.ops_per_sec, 200.0);
        assert_eq!(r.spread, 1.5);
        assert_eq!(r.hist.len(), 300);
        assert!((r.p50_ns as f64 - 2_000.0).abs() <= 2.0, "{}", r.p50_ns);
        assert!((r.p99_ns as f64 - 4_000.0).abs() <= 4.0, "{}", r.p99_ns);
        assert_eq!(r.fences_per_op, Some(3.0));
        assert_eq!(r.flushes_per_op, None);
        assert_eq!((r.threads, r.runs), (2, 3));
        assert_eq!(r.variant, "files=10");
    }

    #[test]
    fn harness_cost_and_its_tmpfs_yardstick_are_measured() {
        let h = harness_cost();
        assert!(h.empty_op_ns > 0.0 && h.tmpfs_pwrite_4k_ns > 0.0, "{h:?}");
    }
}
