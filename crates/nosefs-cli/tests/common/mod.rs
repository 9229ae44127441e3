//! Helpers the end-to-end tests share.

pub mod aio;
mod files;
mod io;
mod locks;
mod programs;

// The scripts, by subject; each test crate uses some of them.
#[allow(unused_imports)]
pub use files::*;
#[allow(unused_imports)]
pub use io::*;
#[allow(unused_imports)]
pub use locks::*;
#[allow(unused_imports)]
pub use programs::*;

use std::path::Path;
use std::process::Output;

/// A process's status, stdout and stderr, for assertion messages.
#[allow(dead_code)]
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that a script run on noseFS (in `ours_dir`) printed what the same script printed on a
/// kernel directory (`plain_dir`; each directory's name reads `$D`), that both succeeded, and
/// that noseFS's run printed nothing on stderr. Returns noseFS's stdout.
#[allow(dead_code)]
pub fn assert_same_as_kernel(
    ours: &Output,
    ours_dir: &Path,
    plain: &Output,
    plain_dir: &Path,
) -> String {
    assert!(
        plain.status.success(),
        "on the kernel directory: {}",
        text(plain)
    );
    let normal = |o: &Output, dir: &Path| {
        String::from_utf8_lossy(&o.stdout).replace(dir.to_str().unwrap(), "$D")
    };
    assert_eq!(
        normal(ours, ours_dir),
        normal(plain, plain_dir),
        "\nunder the shim: {}\non the kernel: {}",
        text(ours),
        text(plain)
    );
    assert!(
        ours.status.success() && ours.stderr.is_empty(),
        "{}",
        text(ours)
    );
    String::from_utf8_lossy(&ours.stdout).into_owned()
}
