//! `nosefs`: make, check, mount, benchmark and stress noseFS images, and run programs on them.

#![forbid(unsafe_code)]

mod bench;
mod crash;
mod mount;
mod pages;
mod run;
mod size;
mod stress;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fsck::{fsck, FsckOptions};
use nosefs_core::image::Image;
use nosefs_core::info::{zone_rows, Usage};
use nosefs_core::mkfs::mkfs;
use nosefs_core::pmem::{Access, FlushKind};
use nosefs_core::Error;

use size::{format_bytes, parse_size};

/// noseFS: a file system for persistent memory.
#[derive(Debug, Parser)]
#[command(
    name = "nosefs",
    version,
    about = "noseFS, a file system for persistent memory: make and check images, mount them, run programs on them, benchmark and stress them",
    after_help = "Use it: nosefs mkfs IMG --size 4G; nosefs mount IMG MNT -o allow_other; nosefs run --at MNT -- PROGRAM. Reference: docs/usage.md and docs/shim.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Format IMAGE (created if missing) as a noseFS file system.
    Mkfs(MkfsArgs),
    /// Serve IMAGE at MOUNTPOINT through FUSE. Returns once the mount is live (or stays in the
    /// foreground with -f). Unmounting, SIGINT or SIGTERM commit every file and mark it clean.
    Mount(mount::MountArgs),
    /// Run PROGRAM with the preload shim: its calls on paths under --at are served by noseFS.
    /// With --image, inside the process at library speed (embedded mode: one process holds the
    /// image at a time); with --at a `nosefs mount` mountpoint alone, by that mount's daemon
    /// (any number of processes).
    Run(run::RunArgs),
    /// Print the zones of IMAGE and how much of each is in use.
    Info {
        /// The image file or device-dax device.
        image: PathBuf,
    },
    /// Benchmarks: the native library side by side with tmpfs, ramdisk file systems and any
    /// directory, with tables, JSON and plots.
    Bench(bench::BenchArgs),
    /// Internal: one `nosefs-preload` benchmark run, started by `nosefs bench` under the shim.
    #[command(hide = true)]
    BenchWorker,
    /// Run the crash-consistency checker: every crash state of every operation, recovered,
    /// checked with fsck and against the states before and after.
    CrashCheck(crash::CrashArgs),
    /// Random operations of every kind on DIR (a mount, or under `nosefs run`), from threads and
    /// processes, each answer checked against a model of what the kernel gives.
    Stress(stress::StressArgs),
    /// Check IMAGE against every invariant of the format. Exit status as fsck(8): 0 clean,
    /// 1 errors corrected, 4 errors left, 8 operational error.
    Fsck {
        /// The image file or device-dax device.
        image: PathBuf,
        /// Repair what can be repaired safely (superblock from its backup, the block bitmap).
        #[arg(long)]
        repair: bool,
        /// Give a clean image made by an older build the features this build's mkfs gives
        /// (today move entries in file logs: cheaper page overwrites); crash-safe, and an image
        /// so upgraded no longer mounts with builds before 2026-11-27.
        #[arg(long, conflicts_with = "repair")]
        upgrade: bool,
        /// Print only problems, not the summary.
        #[arg(short, long)]
        quiet: bool,
    },
}

#[derive(Debug, clap::Args)]
struct MkfsArgs {
    /// The image: a file (default location /dev/shm) or a device-dax device.
    image: PathBuf,
    /// Image size, e.g. 1G, 512MiB, 4096 (bytes). Required for a new file; a device's size is
    /// its own.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Pinode slots (default: one per 8 KiB of image).
    #[arg(long)]
    pinodes: Option<u64>,
    /// Hash buckets, rounded up to a power of two (default: the pinode count).
    #[arg(long)]
    buckets: Option<u64>,
    /// Logs in each of the directory and file journals (default: 256).
    #[arg(long)]
    logs: Option<u64>,
    /// Extent slots (default: one per 4 KiB of image).
    #[arg(long)]
    extents: Option<u64>,
    /// Long-name records, for names over 40 bytes (default: pinodes / 16).
    #[arg(long)]
    long_names: Option<u64>,
    /// Seed of the name hash (default: random); a fixed seed makes an image reproducible.
    #[arg(long, hide = true)]
    hash_seed: Option<u64>,
    /// Format without high-water marks, as builds before them did: such an image mounts in time
    /// proportional to its table sizes, and older builds can write it.
    #[arg(long)]
    no_marks: bool,
    /// Leave out extended attributes (an image earlier builds can mount; setxattr then answers
    /// EOPNOTSUPP).
    #[arg(long)]
    no_xattrs: bool,
    /// Leave out move entries in file logs (an image builds before 2026-11-27 can mount; a page
    /// overwritten in place then commits as a new extent).
    #[arg(long)]
    no_moves: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Mount(_)) {
        // Rust ignores SIGPIPE, so printing a report into a closed pipe (`nosefs bench
        // --list-targets | head`) panics. Commands that print reports die of SIGPIPE instead,
        // as other command-line tools do. The FUSE server keeps it ignored: a daemon should see
        // EPIPE, not die of it.
        sigpipe::reset();
    }
    match cli.command {
        Command::Mkfs(args) => report(run_mkfs(args)),
        Command::Info { image } => report(run_info(&image)),
        Command::Stress(args) => match stress::stress(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nosefs stress: {e}");
                ExitCode::FAILURE
            }
        },
        Command::CrashCheck(args) => match crash::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nosefs crash-check: {e}");
                ExitCode::from(1)
            }
        },
        Command::Run(args) => {
            let Err(e) = run::run(&args);
            eprintln!("nosefs run: {e}");
            ExitCode::from(127)
        }
        Command::Mount(args) => match mount::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nosefs mount: {e}");
                ExitCode::from(1)
            }
        },
        Command::Bench(args) => match bench::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nosefs bench: error: {e}");
                ExitCode::from(1)
            }
        },
        Command::BenchWorker => match nosefs_bench::preload::worker_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nosefs bench-worker: {e}");
                ExitCode::from(1)
            }
        },
        Command::Fsck {
            image,
            upgrade: true,
            ..
        } => run_upgrade(&image),
        Command::Fsck {
            image,
            repair,
            quiet,
            ..
        } => run_fsck(&image, repair, quiet),
    }
}

fn report(result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nosefs: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_mkfs(args: MkfsArgs) -> Result<(), Error> {
    let params = MkfsParams {
        image_bytes: args.size.unwrap_or(0),
        pinodes: args.pinodes,
        buckets: args.buckets,
        logs: args.logs,
        extents: args.extents,
        long_names: args.long_names,
        hash_seed: args.hash_seed,
        prefault: false,
        without_marks: args.no_marks,
        without_xattrs: args.no_xattrs,
        without_moves: args.no_moves,
    };
    let started = std::time::Instant::now();
    let g = mkfs(&args.image, &params)?;
    println!(
        "formatted {}: {}, {} pinodes, {} data blocks, metadata {} ({:.2}%), in {:.2} s",
        args.image.display(),
        format_bytes(g.image_bytes),
        g.pinode_count() - 1,
        g.data_block_count(),
        format_bytes(g.metadata_bytes()),
        g.metadata_bytes() as f64 * 100.0 / g.image_bytes as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn run_info(path: &Path) -> Result<(), Error> {
    let image = when_image_free(|| Image::open(path, Access::ReadOnly))?;
    let sb = image.superblock();
    let g = image.geometry();
    let usage = Usage::scan(&image);
    let map = image.region().info();
    println!("image        {}", path.display());
    println!("uuid         {}", sb.uuid_string());
    println!("version      {}", sb.version.get());
    println!(
        "size         {} ({} bytes)",
        format_bytes(g.image_bytes),
        g.image_bytes
    );
    let state = if image.superblock().is_clean() {
        "clean"
    } else {
        "not cleanly unmounted"
    };
    println!("state        {state}, mounted {} times", sb.mount_count());
    println!(
        "mapping      {}, MAP_SYNC {}, flush {} (best on this CPU: {})",
        map.kind,
        if map.map_sync { "yes" } else { "no" },
        image.region().flush_kind(),
        FlushKind::detect()
    );
    if let Some(pages) = pages::describe(path) {
        println!("pages        {pages}");
    }
    println!(
        "mapped files dirty pages found by {}",
        nosefs_core::file::mmap::write_tracking_here()
    );
    println!();
    println!(
        "{:<14} {:>14} {:>12} {:>12} {:>12}",
        "zone", "offset", "size", "records", "in use"
    );
    println!(
        "{:<14} {:>14} {:>12} {:>12} {:>12}",
        "superblocks",
        0,
        format_bytes(8192),
        2,
        "-"
    );
    for row in zone_rows(&image, &usage) {
        let used = row.used.map_or("-".to_string(), |u| u.to_string());
        println!(
            "{:<14} {:>14} {:>12} {:>12} {:>12}",
            row.zone.name(),
            row.span.offset,
            format_bytes(row.bytes),
            row.span.count,
            used
        );
    }
    println!();
    println!(
        "pinodes      {} of {} in use ({} files and directories, {} directories)",
        usage.pinodes_used,
        g.pinode_count() - 1,
        usage.inodes_used,
        usage.directories
    );
    println!(
        "extents      {} of {} in use",
        usage.extents_used,
        g.extent_count() - 1
    );
    println!(
        "data         {} of {} blocks in use ({} live)",
        usage.blocks_used,
        g.data_block_count(),
        format_bytes(usage.live_bytes)
    );
    match usage.space_amplification() {
        Some(a) => println!("space amplification {a:.3} (allocated / live bytes)"),
        None => println!("space amplification n/a (no file data)"),
    }
    println!(
        "journals     {} directory logs pending, {} file logs in use",
        usage.dir_logs_pending, usage.file_logs_pending
    );
    match usage.marks {
        Some([pinodes, long_names, extents]) => println!(
            "high water   pinodes {pinodes}, long names {long_names}, extents {extents} \
             (mount reads the tables up to these)"
        ),
        None => println!("high water   not kept (an older image: mount reads whole tables)"),
    }
    Ok(())
}

/// How long a command waits for an image another process holds.
const IMAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `open` until the image is no longer held by another process, for up to [`IMAGE_WAIT`]:
/// a `nosefs mount` lets go of its image only after the kernel's unmount has returned, once it
/// has committed everything, so `umount MNT; nosefs fsck IMAGE` (or a mount) right after was
/// refused as in use.
pub(crate) fn when_image_free<T>(
    mut open: impl FnMut() -> nosefs_core::Result<T>,
) -> nosefs_core::Result<T> {
    let deadline = std::time::Instant::now() + IMAGE_WAIT;
    loop {
        match open() {
            Err(Error::InUse(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn run_upgrade(path: &Path) -> ExitCode {
    use nosefs_core::fsck::{upgrade, Upgrade};
    match when_image_free(|| upgrade(path)) {
        Ok(Upgrade::AlreadyCurrent) => {
            println!("{}: has every feature this build adds", path.display());
            ExitCode::SUCCESS
        }
        Ok(Upgrade::MovesEnabled) => {
            println!(
                "{}: upgraded: file logs may hold moves (incompat MOVES); builds before 2026-11-27 no longer mount it",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Ok(Upgrade::MovesImpossible { extents }) => {
            println!(
                "{}: not upgraded: {extents} extent slots, more than moves can name (2^31)",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nosefs fsck: {}: {e}", path.display());
            ExitCode::from(8)
        }
    }
}

fn run_fsck(path: &Path, repair: bool, quiet: bool) -> ExitCode {
    let report = match when_image_free(|| fsck(path, FsckOptions { repair })) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("nosefs fsck: {}: {e}", path.display());
            return ExitCode::from(8);
        }
    };
    for p in &report.problems {
        println!("{p}");
    }
    for p in &report.repaired {
        println!("{p} [repaired]");
    }
    if !quiet {
        for note in &report.notes {
            println!("note: {note}");
        }
        let summary = match report.exit_code() {
            0 => "clean".to_string(),
            1 => format!("{} problems repaired", report.repaired.len()),
            _ => format!("{} problems found", report.problems.len()),
        };
        println!("{}: {summary}", path.display());
    }
    ExitCode::from(report.exit_code() as u8)
}
