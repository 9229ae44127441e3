//! `nosefs bench`: run the micro-benchmarks on several targets side by side and report them.

use std::path::PathBuf;

use nosefs_bench::suite::{self, Plan};
use nosefs_bench::target::TargetSpec;
use nosefs_bench::workload::{Sizes, Workload};
use nosefs_bench::{cleanup, plot, report};

use crate::size::parse_size;

/// Arguments of `nosefs bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// A target; repeat for several, measured side by side (the first is the baseline of the
    /// ratio column): `nosefs` (native library, fresh image in --image-dir), `nosefs-sync` (mounted
    /// `sync`), `nosefs:PATH` (image in directory PATH, or device-dax PATH), `nosefs-fuse` (a
    /// fresh image served through FUSE by the harness), `nosefs-floor` (the native library's
    /// stores, write-backs and fences alone, recorded and replayed: the persistence floor; dirops
    /// and fileops, one thread), `dir:PATH` (any mounted file system), `tmpfs` (a private tmpfs), `ramdisk:KIND` (KIND: ext2, ext3, ext4,
    /// ext4-journal, ext4-nodelalloc, xfs, xfs-ag464, btrfs, f2fs, nilfs2). Default: nosefs,
    /// tmpfs, ramdisk:ext4.
    #[arg(long = "target", value_name = "TARGET")]
    targets: Vec<String>,
    /// A workload; repeat for several: dirops, fileops, mmap, fragment (micro), fileserver,
    /// fileserver-1k, varmail, varmail-1k, webserver, webproxy (Filebench equivalents),
    /// webproxy-depths (webproxy at directory depths 0.7, 2.1 and 3.4), calls (lseek(SEEK_CUR) on the target's file and on a kernel file: the cost of a call itself; then fstat, stat and open+close of a file: what a metadata call adds), sqlite, redis, kv, rocksdb, oltp and tools (the real programs: SQLite with synchronous=FULL in rollback-journal and WAL mode, Redis with appendfsync always, YCSB A-F on LMDB and LevelDB, RocksDB's db_bench with every write synced, TPC-B and a TPC-C-like mix on PostgreSQL 15, sysbench oltp_read_write on MariaDB, the TPC-C-like mix on SQLite, tar/git/make/rsync on a source tree; their data checked after each run; not on the native library). Default: dirops,
    /// fileops, mmap.
    #[arg(long = "workload", value_name = "WORKLOAD")]
    workloads: Vec<String>,
    /// A thread count; repeat for a sweep. Default: 1, 2, 4, ... up to the CPUs available.
    #[arg(long = "threads", value_name = "N")]
    threads: Vec<usize>,
    /// Runs per target, workload and thread count; the median is reported. Default 3 (1 for
    /// --matrix --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Smaller sizes: the default targets and workloads in about two minutes.
    #[arg(long)]
    quick: bool,
    /// The seed-000 file-system matrix: by default every macro workload (fileserver, varmail,
    /// webserver, webproxy at depths 0.7, 2.1 and 3.4) on noseFS (native and FUSE), tmpfs and
    /// every ramdisk kind; the report gets a table and bar charts normalized to the best.
    /// Application workloads given with it (--workload oltp, kv, ...) add their headline
    /// operations as columns, and noseFS's daemon clients and embedded shim as targets.
    #[arg(long)]
    matrix: bool,
    /// dirops: files per thread; repeat for several sizes (100 to 1000000).
    #[arg(long = "files", value_name = "N")]
    files: Vec<usize>,
    /// fileops: operations per thread in each phase.
    #[arg(long)]
    writes: Option<usize>,
    /// Macro workloads: factor applied to the papers' file counts (default 0.1, --quick 0.01).
    #[arg(long)]
    scale: Option<f64>,
    /// Macro workloads: seconds each run is timed (default 10, --quick 3).
    #[arg(long)]
    duration: Option<f64>,
    /// Write the records as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a markdown report (report.md), results.json and SVG plots into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Where native images and ramdisk backing files go.
    #[arg(long, default_value = "/dev/shm")]
    image_dir: PathBuf,
    /// Size of the private tmpfs and of each ramdisk (sparse: only what is written takes memory).
    #[arg(long, default_value = "8G")]
    ramdisk_size: String,
    /// List the targets this machine can run, and why the others cannot, then exit.
    #[arg(long)]
    list_targets: bool,
    /// Hold the CPU wake-up latency at 0 us through /dev/cpu_dma_latency while the run lasts
    /// (as tuned's latency-performance profile does; needs root). On a virtual machine a halted
    /// CPU takes tens of microseconds to wake, which paces programs that wait on each other
    /// across processes (Redis and its client) except where a polling thread (noseFS's daemon)
    /// keeps CPUs awake; with the hold every target gets awake CPUs, but the daemon's clients
    /// measured slower on several programs (docs/benchmarks.md). The report says which way a run
    /// was measured.
    #[arg(long)]
    hold_wakeup_latency: bool,
}

fn default_threads() -> Vec<usize> {
    let cpus = nosefs_bench::runner::cpu_order().len().max(1);
    let mut threads: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2))
        .take_while(|&t| t < cpus)
        .collect();
    threads.push(cpus);
    threads
}

fn plan(args: &BenchArgs) -> Result<Plan, String> {
    let mut sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    if !args.files.is_empty() {
        sizes.files = args.files.clone();
    }
    if let Some(scale) = args.scale {
        if !(scale > 0.0 && scale <= 10.0) {
            return Err("--scale must be in (0, 10]".into());
        }
        sizes.macro_scale = scale;
    }
    if let Some(seconds) = args.duration {
        if !(seconds > 0.0 && seconds <= 3600.0) {
            return Err("--duration must be in (0, 3600] seconds".into());
        }
        sizes.macro_seconds = seconds;
    }
    if let Some(writes) = args.writes {
        if writes < 64 {
            return Err("--writes must be at least 64 (the file must hold a 256 KiB read)".into());
        }
        sizes.writes = writes;
    }
    let or_default = |given: &[String], default: &[&str]| -> Vec<String> {
        if given.is_empty() {
            default.iter().map(|s| s.to_string()).collect()
        } else {
            given.to_vec()
        }
    };
    let matrix_targets = nosefs_bench::matrix::targets();
    let default_targets: Vec<&str> = if args.matrix {
        matrix_targets.iter().map(String::as_str).collect()
    } else {
        vec!["nosefs", "tmpfs", "ramdisk:ext4"]
    };
    let default_workloads: &[&str] = if args.matrix {
        &nosefs_bench::matrix::WORKLOADS
    } else {
        &["dirops", "fileops", "mmap"]
    };
    let mut workloads = Vec::new();
    for name in or_default(&args.workloads, default_workloads) {
        workloads.extend(Workload::expand(&name, &sizes)?);
    }
    let mut default_targets = default_targets;
    if args.matrix && workloads.iter().any(|w| matches!(w, Workload::App(_))) {
        // The programs reach noseFS as users run them: as the daemon's clients and embedded.
        default_targets.splice(1..1, ["nosefs-client", "nosefs-preload"]);
    }
    let targets = or_default(&args.targets, &default_targets)
        .iter()
        .map(|t| TargetSpec::parse(t))
        .collect::<Result<Vec<_>, _>>()?;
    let threads = if args.threads.is_empty() {
        default_threads()
    } else {
        args.threads.clone()
    };
    let runs = args
        .runs
        .unwrap_or(if args.matrix && args.quick { 1 } else { 3 });
    if threads.contains(&0) || runs == 0 {
        return Err("--threads and --runs must be at least 1".into());
    }
    Ok(Plan {
        targets,
        workloads,
        threads,
        runs,
        sizes,
        image_dir: args.image_dir.clone(),
        ramdisk_bytes: parse_size(&args.ramdisk_size)?,
        preload_lib: crate::run::shim_path().ok(),
        hold_wakeup_latency: args.hold_wakeup_latency,
    })
}

fn list_targets() {
    println!("nosefs            native library (fresh image per run)");
    println!("nosefs-sync       native library mounted with the sync option");
    println!("nosefs:PATH       native library, image in directory PATH or on device-dax PATH");
    println!("nosefs-fuse       a fresh image served through FUSE by the harness");
    println!("nosefs-floor      the native library's persistence work alone, replayed (dirops, fileops; 1 thread)");
    println!("nosefs-preload    a fresh image served by the preload shim in a worker process, through libc");
    println!("nosefs-client     the same worker in daemon mode: served over shared memory by a daemon that also serves FUSE");
    println!("dir:PATH          any mounted file system, through libc calls");
    println!("tmpfs             a private tmpfs (needs root)");
    for kind in nosefs_bench::scratch::RamdiskKind::ALL {
        let state = kind
            .unavailable()
            .map_or("available".to_string(), |why| format!("unavailable: {why}"));
        println!("ramdisk:{:<9} {state}", kind.name());
    }
    match nosefs_bench::scratch::dax_unavailable() {
        Some(why) => println!("ext4-dax, xfs-dax   unavailable: {why}"),
        None => {
            println!("ext4-dax, xfs-dax   a /dev/pmem device exists; use dir:PATH on its mount")
        }
    }
}

/// Runs `nosefs bench`.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.list_targets {
        list_targets();
        return Ok(());
    }
    let plan = plan(args)?;
    cleanup::install_interrupt_handler().map_err(|e| format!("cannot handle signals: {e}"))?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    eprintln!(
        "nosefs bench: {} target(s), {} workload(s), threads {:?}, {} run(s){}",
        plan.targets.len(),
        plan.workloads.len(),
        plan.threads,
        plan.runs,
        if args.quick { ", quick sizes" } else { "" }
    );
    let outcome = suite::run(&plan);
    let baseline = plan.targets[0].label();
    print!("{}", report::table(&outcome.records, &baseline));
    if nosefs_bench::matrix::has_cells(&outcome.records) {
        print!(
            "{}",
            nosefs_bench::matrix::section(&outcome.records, &outcome.skipped)
        );
    }
    println!();
    print!("{}", report::notes(&outcome));
    if outcome.records.is_empty() {
        return Err("nothing ran (see the reasons above)".into());
    }
    let json = report::json(&outcome.records);
    if let Some(path) = &args.json {
        std::fs::write(path, &json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(dir) = &args.out {
        let plots = plot::write_plots(&outcome.records, dir)?;
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let markdown = report::markdown(&outcome, &baseline, &command, &plots);
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        write("report.md", &markdown)?;
        write("results.json", &json)?;
        println!("\nreport: {}", dir.join("report.md").display());
    }
    Ok(())
}
