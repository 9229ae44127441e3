//! The crash checker's teeth: a commit protocol with a fence left out must be caught. Its own
//! test binary, because an injected fault is process-wide and would break other tests running
//! beside it.

use nosefs_crash::workload::Op;
use nosefs_crash::{Checker, Config};

/// With the fence after the commit store left out, apply stores can persist without the commit:
/// the checker must see a broken state.
#[test]
fn a_missing_commit_fence_is_caught() {
    use nosefs_core::namespace::txn::fault::{inject, Fault};
    for fault in [Fault::SkipCommitFence, Fault::SkipApplyFence] {
        inject(fault);
        let mut checker = Checker::new(Config {
            usability_every: 1000,
            ..Config::default()
        });
        checker.check("single:create", &[Op::Create("/n")]);
        checker.check("single:unlink", &[Op::Unlink("/d/c")]);
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
