//! The `nosefs-preload` target: the workloads through libc in a process running under the preload
//! shim, as an unmodified program would run under `nosefs run`.
//!
//! For each run the harness formats a fresh image (pre-faulted, like the native target's), makes
//! an empty directory for the shim's prefix, and starts a *worker*: this executable again
//! (`nosefs bench-worker`), with LD_PRELOAD naming the shim and the job (workload, threads,
//! sizes) in [`ENV_JOB`]. The worker runs the workload on the [`Syscalls`] target inside the
//! prefix, exactly the code `tmpfs` and `ramdisk:` runs go through, and prints its measurements
//! as JSON on stdout. The shim mounts the image at the worker's first noseFS call (the workload's
//! untimed setup) with its pages populated, and unmounts at exit.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::cleanup::{self, Undo};
use crate::runner::Sample;
use crate::stats::histogram;
use crate::target::{params_for, Syscalls};
use crate::workload::{Measured, Sizes, Workload};

/// The `f_type` the shim's statfs reports for noseFS ("nose").
const NOSEFS_STATFS_TYPE: i64 = 0x6e6f_7365;

/// Environment variable carrying a worker's job (JSON).
pub const ENV_JOB: &str = "NOSEFS_BENCH_JOB";

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    workload: Workload,
    threads: usize,
    sizes: Sizes,
    dir: PathBuf,
}

/// A [`Measured`] on the wire: the histogram as (value, count) pairs.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    op: String,
    io_size: u64,
    variant: String,
    ops: u64,
    elapsed_ns: u64,
    latencies_ns: Vec<(u64, u64)>,
}

impl Wire {
    fn from_measured(m: &Measured) -> Wire {
        Wire {
            op: m.op.clone(),
            io_size: m.io_size,
            variant: m.variant.clone(),
            ops: m.sample.ops,
            elapsed_ns: m.sample.elapsed_ns,
            latencies_ns: m
                .sample
                .hist
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }

    fn into_measured(self) -> Measured {
        let mut hist = histogram();
        for (value, count) in self.latencies_ns {
            hist.saturating_record_n(value, count);
        }
        Measured {
            op: self.op,
            io_size: self.io_size,
            variant: self.variant,
            sample: Sample {
                ops: self.ops,
                elapsed_ns: self.elapsed_ns,
                hist,
                flushes: None,
                fences: None,
            },
        }
    }
}

/// One run of `workload` under the shim `lib`, on a fresh image in directory `place`.
pub fn run_once(
    place: &Path,
    lib: &Path,
    workload: Workload,
    threads: usize,
    sizes: &Sizes,
) -> io::Result<Vec<Measured>> {
    let id = format!("nosefs-bench-preload-{}", std::process::id());
    let image = place.join(format!("{id}.img"));
    let prefix = place.join(format!("{id}.d"));
    let _image_undo = cleanup::register(Undo::RemoveFile(image.clone()));
    let _prefix_undo = cleanup::register(Undo::RemoveTree(prefix.clone()));
    let result = (|| {
        // As `nosefs mkfs` and `nosefs run` leave it: not pre-faulted, not populated (the core
        // makes pages ready ahead of its writes in the background), so the figures are what a
        // user's program gets on a fresh image.
        let params = params_for(workload.needs(threads, sizes));
        nosefs_core::mkfs::mkfs(&image, &params)
            .map_err(|e| io::Error::other(format!("cannot prepare an image: {e}")))?;
        std::fs::create_dir_all(&prefix)?;
        let job = Job {
            workload,
            threads,
            sizes: sizes.clone(),
            dir: prefix.clone(),
        };
        let mut worker = Command::new(std::env::current_exe()?);
        worker.env("NOSEFS_IMAGE", &image);
        run_worker(worker, lib, &job)
    })();
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_dir_all(&prefix);
    result
}

/// One run of `workload` under the shim `lib` in daemon mode, on the noseFS mount at `mount`
/// (served by a daemon).
pub fn run_on_daemon(
    mount: &Path,
    lib: &Path,
    workload: Workload,
    threads: usize,
    sizes: &Sizes,
) -> io::Result<Vec<Measured>> {
    let job = Job {
        workload,
        threads,
        sizes: sizes.clone(),
        dir: mount.to_path_buf(),
    };
    let mut worker = Command::new(std::env::current_exe()?);
    worker.env_remove("NOSEFS_IMAGE");
    run_worker(worker, lib, &job)
}

fn run_worker(mut worker: Command, lib: &Path, job: &Job) -> io::Result<Vec<Measured>> {
    let out = worker
        .arg("bench-worker")
        .env("LD_PRELOAD", lib)
        .env("NOSEFS_AT", &job.dir)
        .env(
            ENV_JOB,
            serde_json::to_string(job).map_err(io::Error::other)?,
        )
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(io::Error::other(format!(
            "the worker under the shim failed ({}): {}",
            out.status,
            stderr.trim()
        )));
    }
    let wire: Vec<Wire> = serde_json::from_slice(&out.stdout)
        .map_err(|e| io::Error::other(format!("the worker's report does not parse: {e}")))?;
    Ok(wire.into_iter().map(Wire::into_measured).collect())
}

/// The worker (`nosefs bench-worker`): runs the job in [`ENV_JOB`] and prints its measurements.
pub fn worker_main() -> Result<(), String> {
    let text = std::env::var(ENV_JOB).map_err(|_| format!("{ENV_JOB} is not set"))?;
    let job: Job = serde_json::from_str(&text).map_err(|e| format!("bad job: {e}"))?;
    // The shim reports noseFS's type for its prefix; anything else means the calls below would
    // measure the kernel's empty directory instead.
    let dir = std::ffi::CString::new(job.dir.as_os_str().as_encoded_bytes())
        .map_err(|_| "NUL in the directory".to_string())?;
    match crate::sys::fs_type(&dir) {
        Ok(NOSEFS_STATFS_TYPE) => {}
        other => {
            return Err(format!(
                "{} is not served by the preload shim (statfs: {other:?}); is LD_PRELOAD honoured?",
                job.dir.display()
            ))
        }
    }
    let measured = {
        let target = Syscalls::new(&job.dir).map_err(|e| format!("{}: {e}", job.dir.display()))?;
        job.workload
            .run_once(&target, job.threads, &job.sizes)
            .map_err(|e| e.to_string())?
    };
    let wire: Vec<Wire> = measured.iter().map(Wire::from_measured).collect();
    let json = serde_json::to_string(&wire).map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}
