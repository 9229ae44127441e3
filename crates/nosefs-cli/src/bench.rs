//! `nosefs bench`: run a workload on several targets side by side and print the comparison.

use std::path::PathBuf;

use nosefs_bench::dirops::{self, OpResult};
use nosefs_bench::fileops::{self, FileResult, FileopsConfig, NativeFile, SyscallFile};
use nosefs_bench::target::{Native, Syscalls};

/// Arguments of `nosefs bench dirops`.
#[derive(Debug, clap::Args)]
pub struct DiropsArgs {
    /// Files in the directory; repeat for several sizes (e.g. --files 1000 --files 1000000).
    #[arg(long, default_values_t = [100_000usize])]
    files: Vec<usize>,
    /// Runs per target and size; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Targets: `nosefs` (the native library), `tmpfs` (a directory in /dev/shm), `dir:PATH`.
    /// The first is the baseline of the ratio column.
    #[arg(long = "target", default_values_t = ["nosefs".to_string(), "tmpfs".to_string()])]
    targets: Vec<String>,
    /// Where the native target's image goes.
    #[arg(long, default_value = "/dev/shm")]
    image_dir: PathBuf,
}

/// Runs `nosefs bench dirops`.
pub fn dirops(args: &DiropsArgs) -> Result<(), String> {
    let mut results: Vec<OpResult> = Vec::new();
    for &n in &args.files {
        for target in &args.targets {
            eprintln!("dirops: {target}, {n} files, {} runs", args.runs);
            results.extend(run_target(target, n, args)?);
        }
    }
    let harness_ns = dirops::harness_cost_ns();
    print_table(&results, &args.targets[0]);
    println!("\nharness cost per timed operation: {harness_ns:.0} ns (two clock reads and a histogram record)");
    Ok(())
}

fn run_target(target: &str, n: usize, args: &DiropsArgs) -> Result<Vec<OpResult>, String> {
    let syscalls = |label: &str, dir: PathBuf| {
        Syscalls::new(label, &dir, n).map_err(|e| format!("cannot prepare {}: {e}", dir.display()))
    };
    match target {
        "nosefs" => {
            Native::new(&args.image_dir, n).map_err(|e| e.to_string())?;
            Ok(dirops::run(
                || Native::new(&args.image_dir, n).expect("image"),
                n,
                args.runs,
            ))
        }
        "tmpfs" => {
            syscalls("tmpfs", "/dev/shm".into())?;
            Ok(dirops::run(
                || syscalls("tmpfs", "/dev/shm".into()).expect("dir"),
                n,
                args.runs,
            ))
        }
        other => match other.strip_prefix("dir:") {
            Some(path) => {
                syscalls(other, path.into())?;
                Ok(dirops::run(
                    || syscalls(other, path.into()).expect("dir"),
                    n,
                    args.runs,
                ))
            }
            None => Err(format!(
                "unknown target `{other}` (nosefs, tmpfs or dir:PATH)"
            )),
        },
    }
}

fn print_table(results: &[OpResult], baseline: &str) {
    println!(
        "| target | op | files | ops/s (median) | spread | p50 ns | p99 ns | p99.9 ns | last-1000 mean ns | x {baseline} | flushes/op | fences/op |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let base = results
            .iter()
            .find(|b| b.target == baseline && b.op == r.op && b.files == r.files)
            .map_or(f64::NAN, |b| r.ops_per_sec / b.ops_per_sec);
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "| {} | {} | {} | {:.0} | {:.1}% | {} | {} | {} | {:.0} | {:.2} | {} | {} |",
            r.target,
            r.op,
            r.files,
            r.ops_per_sec,
            r.spread * 100.0,
            r.p50_ns,
            r.p99_ns,
            r.p999_ns,
            r.tail_mean_ns,
            base,
            opt(r.flushes_per_op),
            opt(r.fences_per_op)
        );
    }
}

/// Arguments of `nosefs bench fileops`.
#[derive(Debug, clap::Args)]
pub struct FileopsArgs {
    /// Operations per write phase (4 KiB appends, 4 KiB and 1 KiB random overwrites, each with
    /// fsync).
    #[arg(long, default_value_t = 20_000)]
    writes: usize,
    /// Size in MiB of the file read sequentially in 1 MiB reads.
    #[arg(long, default_value_t = 1024)]
    read_mib: u64,
    /// Size in MiB of the file fragmented by random 1 KiB overwrites, then read again.
    #[arg(long, default_value_t = 64)]
    frag_mib: u64,
    /// Random 1 KiB overwrites (each with fsync) that fragment it.
    #[arg(long, default_value_t = 100_000)]
    frag_overwrites: usize,
    /// Runs per target; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Targets: `nosefs`, `tmpfs` (a file in /dev/shm), `dir:PATH`. The first is the baseline.
    #[arg(long = "target", default_values_t = ["nosefs".to_string(), "tmpfs".to_string()])]
    targets: Vec<String>,
    /// Where the native target's image goes.
    #[arg(long, default_value = "/dev/shm")]
    image_dir: PathBuf,
}

/// Runs `nosefs bench fileops`.
pub fn fileops(args: &FileopsArgs) -> Result<(), String> {
    let config = FileopsConfig {
        writes: args.writes,
        read_file_bytes: args.read_mib << 20,
        frag_file_bytes: args.frag_mib << 20,
        frag_overwrites: args.frag_overwrites,
    };
    let data_bytes = (args.writes as u64 * 4096)
        .max(config.read_file_bytes)
        .max(config.frag_file_bytes)
        * 2;
    let mut results: Vec<FileResult> = Vec::new();
    for target in &args.targets {
        eprintln!("fileops: {target}, {} runs", args.runs);
        let dir = |label: &str, path: PathBuf| {
            SyscallFile::new(label, &path)
                .map_err(|e| format!("cannot prepare {}: {e}", path.display()))
        };
        match target.as_str() {
            "nosefs" => {
                NativeFile::new(&args.image_dir, data_bytes).map_err(|e| e.to_string())?;
                let make = || NativeFile::new(&args.image_dir, data_bytes).expect("image");
                results.extend(fileops::run(make, config, args.runs));
            }
            "tmpfs" => {
                dir("tmpfs", "/dev/shm".into())?;
                let make = || dir("tmpfs", "/dev/shm".into()).expect("file");
                results.extend(fileops::run(make, config, args.runs));
            }
            other => {
                let path = other.strip_prefix("dir:").ok_or_else(|| {
                    format!("unknown target `{other}` (nosefs, tmpfs or dir:PATH)")
                })?;
                dir(other, path.into())?;
                let make = || dir(other, path.into()).expect("file");
                results.extend(fileops::run(make, config, args.runs));
            }
        }
    }
    let memcpy = fileops::memcpy_bytes_per_sec(config.read_file_bytes.min(1 << 30));
    print_file_table(&results, &args.targets[0]);
    println!(
        "\nmemcpy bandwidth (1 MiB copies, same run): {:.2} GB/s",
        memcpy / 1e9
    );
    for r in results.iter().filter(|r| r.op == "read seq") {
        println!(
            "{}: sequential 1 MiB reads at {:.0}% of memcpy",
            r.target,
            100.0 * r.bytes_per_sec / memcpy
        );
    }
    for target in &args.targets {
        let bw = |op: &str| {
            results
                .iter()
                .find(|r| &r.target == target && r.op == op)
                .map(|r| r.bytes_per_sec)
        };
        if let (Some(fresh), Some(fragmented)) = (bw("read fresh"), bw("read fragmented")) {
            println!(
                "{target}: reads after {} random 1 KiB overwrites run at {:.2}x the freshly written file's speed",
                args.frag_overwrites,
                fragmented / fresh
            );
        }
    }
    Ok(())
}

fn print_file_table(results: &[FileResult], baseline: &str) {
    println!(
        "| target | op | io bytes | ops/s (median) | MB/s | spread | p50 ns | p99 ns | p99.9 ns | x {baseline} | flushes/op | fences/op |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let base = results
            .iter()
            .find(|b| b.target == baseline && b.op == r.op && b.io_size == r.io_size)
            .map_or(f64::NAN, |b| r.ops_per_sec / b.ops_per_sec);
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.1}% | {} | {} | {} | {:.2} | {} | {} |",
            r.target,
            r.op,
            r.io_size,
            r.ops_per_sec,
            r.bytes_per_sec / 1e6,
            r.spread * 100.0,
            r.p50_ns,
            r.p99_ns,
            r.p999_ns,
            base,
            opt(r.flushes_per_op),
            opt(r.fences_per_op)
        );
    }
}
