//! The crash checker over every operation type alone, every two-operation sequence, and seeded
//! random sequences; and its teeth: a protocol with a fence left out must be caught.

use nosefs_crash::workload::{file_sequences, pairs, random, singles};
use nosefs_crash::{Checker, Config, Report};

fn print(report: &Report) {
    eprintln!(
        "{} workloads, {} operations, {} unique crash images, {} crash-during-recovery images",
        report.workloads, report.operations, report.unique_images, report.recovery_images
    );
    for (op, n) in &report.images_by_op {
        eprintln!("  {op:10} {n} images");
    }
    for failure in report.failures.iter().take(3) {
        eprintln!("{failure}");
    }
}

/// Random sequences beyond the fixed four, from `NOSEFS_CRASH_SEEDS` (numbers separated by
/// spaces; `scripts/test.sh` gives two that change every day, so CI explores new sequences while
/// its time stays the same). A failure names its workload, `random:SEED`, which
/// `nosefs crash-check --workload random:SEED --length 12` runs again.
fn extra_seeds() -> Vec<u64> {
    let seeds = std::env::var("NOSEFS_CRASH_SEEDS").unwrap_or_default();
    let seeds: Vec<u64> = seeds
        .split_whitespace()
        .map(|s| {
            s.parse()
                .expect("NOSEFS_CRASH_SEEDS: numbers separated by spaces")
        })
        .collect();
    if !seeds.is_empty() {
        eprintln!("random sequences also from seeds {seeds:?} (NOSEFS_CRASH_SEEDS)");
    }
    seeds
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "minutes in a debug build: run with cargo test --release"
)]
fn every_operation_alone_and_every_pair_survive_every_crash() {
    let mut workloads: Vec<(String, Vec<_>)> = Vec::new();
    for (i, op) in singles().into_iter().enumerate() {
        workloads.push((format!("single:{i}"), vec![op]));
    }
    for (i, ops) in file_sequences().into_iter().enumerate() {
        workloads.push((format!("file:{i}"), ops));
    }
    for (i, pair) in pairs().into_iter().enumerate() {
        workloads.push((format!("pair:{i}"), pair.to_vec()));
    }
    for seed in (0..4).chain(extra_seeds()) {
        workloads.push((format!("random:{seed}"), random(seed, 12)));
    }
    // One checker per CPU, each taking every n-th workload (CI time: the check is CPU-bound and
    // the checkers share nothing; each deduplicates its own images).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let reports: Vec<Report> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<_> = workloads.iter().skip(t).step_by(threads).collect();
                scope.spawn(move || {
                    let mut checker = Checker::new(Config::default());
                    for (name, ops) in mine {
                        checker.check(name, ops);
                    }
                    checker.report
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut report = Report::default();
    for r in reports {
        for (op, n) in r.images_by_op {
            *report.images_by_op.entry(op).or_default() += n;
        }
        report.unique_images += r.unique_images;
        report.recovery_images += r.recovery_images;
        report.workloads += r.workloads;
        report.operations += r.operations;
        report.failures.extend(r.failures);
    }
    print(&report);
    assert!(report.failures.is_empty(), "{}", report.failures[0]);
    assert!(
        report.unique_images > 1000,
        "the checker explored too little"
    );
    assert!(
        report.recovery_images > 0,
        "crashes during recovery were explored"
    );
}
