//! Random-operation stress of a mounted file system, for every frontend of noseFS: the FUSE
//! mount, the preload shim's embedded mode and its daemon clients (and, to check the stress
//! itself, any kernel file system).
//!
//! Each worker (a thread; `nosefs stress --processes` runs several processes of them) owns a
//! directory `w<N>` under the root and keeps a model of it ([`model::Model`]): every call's
//! answer, success or errno, must be the one the kernel's file systems give on that tree, every
//! read must return the model's bytes, and every `check_every` operations the whole directory
//! (names, types, permissions, link counts, sizes, data checksums, symlink targets, extended
//! attributes) must equal the model. Now and then a worker operates in the directory `shared`
//! that all workers use at once, where only the errnos are checked (names come and go under
//! other workers).
//!
//! At the end each worker writes its model's description to the manifest directory, if given,
//! so that [`verify`] can check the tree again after an unmount, fsck and remount.

mod expect;
pub mod model;
pub mod ops;
mod sys;
pub mod worker;

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use model::Model;
use ops::{Generator, Op, PATHS, SHARED_PATHS};
use worker::Worker;

/// What a stress run does.
#[derive(Debug, Clone)]
pub struct Config {
    /// Operations per worker.
    pub ops: u64,
    /// Seed of the operation sequences (each worker derives its own).
    pub seed: u64,
    /// Threads (workers) in this process.
    pub threads: usize,
    /// Number of the first worker here (processes number theirs apart).
    pub first_worker: usize,
    /// Operation kinds left out (`ops::KINDS`).
    pub skip: Vec<String>,
    /// Whether workers also operate in the shared directory.
    pub shared: bool,
    /// Operations between whole-tree comparisons with the model.
    pub check_every: u64,
    /// Where each worker writes its model's description at the end.
    pub manifest: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            ops: 2000,
            seed: 1,
            threads: 1,
            first_worker: 0,
            skip: Vec::new(),
            shared: true,
            check_every: 100,
            manifest: None,
        }
    }
}

/// What the workers did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Operations run, in the workers' own directories and in the shared one.
    pub ops: u64,
    /// Of those, the ones that failed as the model said they must.
    pub expected_errors: u64,
    /// Whole-tree comparisons made.
    pub tree_checks: u64,
}

fn open_dir(path: &Path) -> Result<std::os::fd::OwnedFd, String> {
    let text = path.to_str().ok_or("the root must be UTF-8")?;
    let cwd = rustix_free_cwd();
    sys::openat(cwd.as_fd(), text, libc::O_RDONLY | libc::O_DIRECTORY, 0).map_err(|e| {
        format!(
            "{}: {}",
            path.display(),
            std::io::Error::from_raw_os_error(e)
        )
    })
}

/// The current directory as a descriptor (through libc, so the shim sees it).
fn rustix_free_cwd() -> std::os::fd::OwnedFd {
    std::fs::File::open(".")
        .expect("the current directory opens")
        .into()
}

/// Makes directory `path` unless it is there.
fn ensure_dir(path: &Path) -> Result<(), String> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("mkdir {}: {e}", path.display())),
    }
}

/// Runs `config.threads` workers under `root` (made if missing); the first failure ends the run.
pub fn run(root: &Path, config: &Config) -> Result<Report, String> {
    ensure_dir(root)?;
    ensure_dir(&root.join("shared"))?;
    let results: Vec<Result<Report, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.threads)
            .map(|t| {
                let n = config.first_worker + t;
                scope.spawn(move || run_worker(root, n, config))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| Err(panic_text(&p))))
            .collect()
    });
    let mut total = Report::default();
    for r in results {
        let r = r?;
        total.ops += r.ops;
        total.expected_errors += r.expected_errors;
        total.tree_checks += r.tree_checks;
    }
    Ok(total)
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a worker panicked".into())
}

fn run_worker(root: &Path, n: usize, config: &Config) -> Result<Report, String> {
    let own = root.join(format!("w{n}"));
    std::fs::create_dir(&own).map_err(|e| format!("mkdir {}: {e}", own.display()))?;
    let mut mine = Worker::new(open_dir(&own)?, Some(Model::default()));
    let mut shared = Worker::new(open_dir(&root.join("shared"))?, None);
    let seed = config.seed.wrapping_mul(1_000_003).wrapping_add(n as u64);
    let mut own_ops = Generator::new(seed, &PATHS);
    let mut shared_ops = Generator::new(seed ^ 0x5eed, &SHARED_PATHS);
    let mut report = Report::default();
    let label = |i: u64, op: &Op| format!("worker {n}, operation {i} ({})", op.kind());
    for i in 0..config.ops {
        let in_shared = config.shared && own_ops.below(8) == 0;
        let (worker, gen) = if in_shared {
            (&mut shared, &mut shared_ops)
        } else {
            (&mut mine, &mut own_ops)
        };
        let op = next_allowed(gen, &config.skip, in_shared);
        let failed = worker
            .step(&op)
            .map_err(|e| format!("{}: {e}", label(i, &op)))?;
        report.ops += 1;
        report.expected_errors += u64::from(failed);
        if (i + 1) % config.check_every == 0 {
            check_tree(&mine).map_err(|e| format!("worker {n} after {} operations: {e}", i + 1))?;
            report.tree_checks += 1;
        }
    }
    check_tree(&mine).map_err(|e| format!("worker {n} at the end: {e}"))?;
    report.tree_checks += 1;
    if let Some(dir) = &config.manifest {
        let lines = mine.describe_model().expect("a modelled worker");
        let file = dir.join(format!("w{n}.txt"));
        std::fs::write(&file, lines.join("\n") + "\n")
            .map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(report)
}

/// The next operation of a kind not skipped. Never a mapped store in the shared directory:
/// another worker may shorten the file under the mapping, and a store past its end is SIGBUS
/// there as on any file system.
fn next_allowed(gen: &mut Generator, skip: &[String], shared: bool) -> Op {
    loop {
        let op = gen.next_op();
        let kind = op.kind();
        let skipped = skip.iter().any(|k| k == kind);
        let racy = shared && kind == "mmap";
        if !skipped && !racy {
            return op;
        }
    }
}

/// Compares the worker's directory with its model, line by line.
fn check_tree(w: &Worker) -> Result<(), String> {
    let want = w.describe_model().expect("a modelled worker");
    let got = w
        .describe_tree()
        .map_err(|e| format!("reading the tree: {}", std::io::Error::from_raw_os_error(e)))?;
    diff(&want, &got)
}

fn diff(want: &[String], got: &[String]) -> Result<(), String> {
    if want == got {
        return Ok(());
    }
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    Err(format!(
        "the tree differs from the model:\n  expected: {missing:?}\n  found:    {extra:?}"
    ))
}

/// Checks every worker directory under `root` against the descriptions in `manifest` (written
/// by a run with [`Config::manifest`]); returns how many workers were checked.
pub fn verify(root: &Path, manifest: &Path) -> Result<usize, String> {
    let mut checked = 0;
    let entries =
        std::fs::read_dir(manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for file in files {
        let Some(name) = file.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let want: Vec<String> = text.lines().map(str::to_string).collect();
        let w = Worker::new(open_dir(&root.join(name))?, None);
        let got = w
            .describe_tree()
            .map_err(|e| format!("{name}: {}", std::io::Error::from_raw_os_error(e)))?;
        diff(&want, &got).map_err(|e| format!("{name}: {e}"))?;
        checked += 1;
    }
    if checked == 0 {
        return Err(format!("no worker manifest in {}", manifest.display()));
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model agrees with the kernel: the stress passes on the machine's own file system
    /// (tmpfs), every kind but the fallocate modes tmpfs lacks.
    #[test]
    fn the_model_agrees_with_the_kernel() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let manifest = tempfile::tempdir().unwrap();
        let config = Config {
            ops: 3000,
            threads: 2,
            skip: vec!["shift".into(), "zero".into()],
            manifest: Some(manifest.path().to_path_buf()),
            ..Config::default()
        };
        let report = run(dir.path(), &config).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.ops, 6000);
        assert_eq!(verify(dir.path(), manifest.path()).unwrap(), 2);
    }

    #[test]
    fn a_tree_that_differs_is_reported() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let manifest = tempfile::tempdir().unwrap();
        let config = Config {
            ops: 300,
            skip: vec!["shift".into(), "zero".into()],
            manifest: Some(manifest.path().to_path_buf()),
            ..Config::default()
        };
        run(dir.path(), &config).unwrap();
        std::fs::write(dir.path().join("w0/unexpected"), b"x").unwrap();
        let err = verify(dir.path(), manifest.path()).unwrap_err();
        assert!(err.contains("unexpected"), "{err}");
    }
}
