//! The crash checker's teeth: a commit protocol with a fence left out must be caught. Its own
//! test binary, because an injected fault is process-wide and would break other tests running
//! beside it.

use nosefs_core::namespace::txn::fault::{inject, Fault};
use nosefs_crash::workload::Op;
use nosefs_crash::{Checker, Config};

/// An injected fault is process-wide: the tests here take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Keeps the calling thread on the CPU it runs on until dropped. The pools of free extents and
/// blocks and the limbo are per CPU: a workload whose fault shows only when an operation reuses
/// what the one before freed must not migrate between the two (it did once in CI, under load,
/// and the fault went unnoticed).
struct PinnedToOneCpu {
    allowed: Option<rustix::thread::CpuSet>,
}

impl PinnedToOneCpu {
    fn new() -> Self {
        let allowed = rustix::thread::sched_getaffinity(None).ok();
        let mut one = rustix::thread::CpuSet::new();
        one.set(rustix::thread::sched_getcpu());
        rustix::thread::sched_setaffinity(None, &one).expect("pin the test thread");
        Self { allowed }
    }
}

impl Drop for PinnedToOneCpu {
    fn drop(&mut self) {
        if let Some(allowed) = &self.allowed {
            let _ = rustix::thread::sched_setaffinity(None, allowed);
        }
    }
}

/// Runs `workloads` with each fence fault in turn and asserts the checker reports a broken state.
fn each_fault_is_caught(workloads: &[(&str, &[Op])]) {
    faults_are_caught(&[Fault::SkipCommitFence, Fault::SkipApplyFence], workloads);
}

/// Runs `workloads` with each of `faults` in turn and asserts the checker reports a broken state.
fn faults_are_caught(faults: &[Fault], workloads: &[(&str, &[Op])]) {
    for &fault in faults {
        let _one_fault_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let _pinned = PinnedToOneCpu::new();
        let mut checker = Checker::new(Config {
            usability_every: 1000,
            ..Config::default()
        });
        inject(fault);
        for (label, ops) in workloads {
            checker.check(label, ops);
        }
        inject(Fault::None);
        if let Some(f) = checker.report.failures.first() {
            eprintln!("{fault:?} caught: {f}");
        }
        assert!(
            !checker.report.failures.is_empty(),
            "{fault:?} went unnoticed"
        );
    }
}

/// With the fence after the commit store left out, apply stores can persist without the commit:
/// the checker must see a broken state.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "minutes in a debug build: the test command runs it with cargo test --release -p nosefs-crash"
)]
fn a_missing_commit_fence_is_caught() {
    each_fault_is_caught(&[
        ("single:create", &[Op::Create("/n")]),
        ("single:unlink", &[Op::Unlink("/d/c")]),
    ]);
}

/// The same for the file journal: an fsync whose commit or apply fence is left out must be caught
/// (a new extent linked and valid, or the pinode pointing at the new list, without the commit).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "minutes in a debug build: the test command runs it with cargo test --release -p nosefs-crash"
)]
fn a_missing_file_commit_fence_is_caught() {
    each_fault_is_caught(&[
        (
            "file:overwrite",
            &[Op::Write("/a", 1000, 1024, 5), Op::Fsync("/a")],
        ),
        ("file:truncate", &[Op::Truncate("/a", 100)]),
    ]);
}

/// Renames whose commit lands in a higher log than the new name's bucket's own, then removals of
/// the new name through that bucket's log: without the settle, a crash replays the rename's
/// record after the removal's and brings the name back. Without the limbo, the freed slots are
/// reused at once, and a replayed record reaches into them. (Eight names, so that some rename
/// lands in the higher log whatever the hash seed.)
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "minutes in a debug build: the test command runs it with cargo test --release -p nosefs-crash"
)]
fn lazily_cleared_logs_need_their_settle_and_limbo() {
    const FROM: [&str; 8] = ["/r0", "/r1", "/r2", "/r3", "/r4", "/r5", "/r6", "/r7"];
    const TO: [&str; 8] = ["/t0", "/t1", "/t2", "/t3", "/t4", "/t5", "/t6", "/t7"];
    let ops: Vec<Op> = FROM
        .iter()
        .zip(TO)
        .flat_map(|(&from, to)| {
            [
                Op::Create(from),
                Op::Rename(from, to),
                Op::Unlink(to),
                Op::Create(from),
            ]
        })
        .collect();
    faults_are_caught(
        &[Fault::SkipSettle, Fault::SkipLimbo],
        &[("lazy:rename-unlink", &ops)],
    );
}

/// A file commit leaves its log's clear in the cache too. An overwrite with fsync frees the
/// retired extent and block; a symbolic link created next takes them from the pools. Without the
/// limbo, a crash replays the overwrite's record over the link's extent (clearing its valid bit
/// and its block's bitmap bit).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "minutes in a debug build: the test command runs it with cargo test --release -p nosefs-crash"
)]
fn lazily_cleared_file_logs_need_their_limbo() {
    faults_are_caught(
        &[Fault::SkipLimbo],
        &[(
            "lazy:overwrite-symlink",
            &[
                Op::Write("/a", 0, 4096, 5),
                Op::Fsync("/a"),
                // Not the same 4,096 bytes again: that would commit as a move, which frees no
                // extent for the symlinks to reuse. This frees two extents and a whole block.
                Op::Write("/a", 0, 8192, 6),
                Op::Fsync("/a"),
                Op::Symlink("/a", "/s"),
                Op::Symlink("/a", "/t"),
            ],
        )],
    );
}
