//! `nosefs bench`: run a workload on several targets side by side and print the comparison.

use std::path::PathBuf;

use nosefs_bench::dirops::{self, OpResult};
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
