//! `nosefs crash-check`: run the crash-consistency checker, or reproduce one of its failures.

use std::path::PathBuf;

use nosefs_crash::workload::{file_sequences, pairs, random, singles, Op};
use nosefs_crash::{Checker, Config};

/// Arguments of `nosefs crash-check`.
#[derive(Debug, clap::Args)]
pub struct CrashArgs {
    /// Only this workload: `single:N`, `file:N`, `pair:N` or `random:SEED` (as a failure report names it).
    #[arg(long)]
    workload: Option<String>,
    /// Random sequences to run after the single operations and the pairs.
    #[arg(long, default_value_t = 4)]
    random: u64,
    /// Operations per random sequence.
    #[arg(long, default_value_t = 12)]
    length: usize,
    /// Seed of the crash-state sampling (and first seed of the random sequences).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random crash states per point when there are too many to enumerate.
    #[arg(long, default_value_t = 64)]
    samples: usize,
    /// Enumerate every crash state at a point when there are at most this many.
    #[arg(long, default_value_t = 512)]
    limit: usize,
    /// Write the first failing crash image here, for `nosefs fsck` and debugging.
    #[arg(long)]
    write_failure_image: Option<PathBuf>,
}

fn workloads(args: &CrashArgs) -> Result<Vec<(String, Vec<Op>)>, String> {
    let mut all: Vec<(String, Vec<Op>)> = Vec::new();
    all.extend(
        singles()
            .into_iter()
            .enumerate()
            .map(|(i, op)| (format!("single:{i}"), vec![op])),
    );
    all.extend(
        file_sequences()
            .into_iter()
            .enumerate()
            .map(|(i, ops)| (format!("file:{i}"), ops)),
    );
    all.extend(
        pairs()
            .into_iter()
            .enumerate()
            .map(|(i, p)| (format!("pair:{i}"), p.to_vec())),
    );
    let seeds = args.seed..args.seed + args.random;
    all.extend(seeds.map(|s| (format!("random:{s}"), random(s, args.length))));
    let Some(only) = &args.workload else {
        return Ok(all);
    };
    if let Some(seed) = only.strip_prefix("random:") {
        let seed: u64 = seed.parse().map_err(|_| format!("bad workload `{only}`"))?;
        return Ok(vec![(only.clone(), random(seed, args.length))]);
    }
    all.into_iter()
        .find(|(label, _)| label == only)
        .map(|w| vec![w])
        .ok_or_else(|| format!("no workload `{only}` (single:N, file:N, pair:N or random:SEED)"))
}

/// Runs the checker; an error lists the failures.
pub fn run(args: &CrashArgs) -> Result<(), String> {
    let config = Config {
        seed: args.seed,
        samples: args.samples,
        exhaustive_limit: args.limit,
        ..Config::default()
    };
    let mut checker = Checker::new(config);
    for (label, ops) in workloads(args)? {
        checker.check(&label, &ops);
    }
    let r = &checker.report;
    println!(
        "{} workloads, {} operations, {} unique crash images, {} crash-during-recovery images",
        r.workloads, r.operations, r.unique_images, r.recovery_images
    );
    for (op, n) in &r.images_by_op {
        println!("  {op:10} {n:>8} crash images");
    }
    let Some(first) = r.failures.first() else {
        println!("no crash state broke a promise");
        return Ok(());
    };
    for failure in r.failures.iter().take(5) {
        println!("{failure}");
    }
    if let Some(path) = &args.write_failure_image {
        std::fs::write(path, &first.image)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("wrote the first failing image to {}", path.display());
    }
    Err(format!("{} crash states broke a promise", r.failures.len()))
}
