//! `nosefs stress DIR`: random operations of every kind a frontend serves, from threads and
//! processes, checked against a model (crate `nosefs-stress`); `--verify` checks a tree again
//! against the manifest a run wrote (after an unmount, fsck and remount).

use std::path::PathBuf;
use std::process::Command;

use nosefs_stress::{ops::KINDS, run, verify, Config};

/// Arguments of `nosefs stress`.
#[derive(Debug, clap::Args)]
pub struct StressArgs {
    /// The directory to work in (on the file system under test): workers make `w<N>` and
    /// `shared` in it.
    dir: PathBuf,
    /// Processes, each running `--threads` workers (the first is this one).
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// Worker threads per process.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Operations per worker.
    #[arg(long, default_value_t = 2000)]
    ops: u64,
    /// Seed of the operation sequences.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Operation kinds to leave out, comma-separated (e.g. `shift,zero` on tmpfs).
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Keep out of the directory the workers share.
    #[arg(long)]
    no_shared: bool,
    /// Write each worker's expected tree here (a kernel directory) at the end of the run.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Only check DIR against the manifest of an earlier run.
    #[arg(long, requires = "manifest")]
    verify: bool,
    /// Internal: number of this process's first worker.
    #[arg(long, hide = true, default_value_t = 0)]
    first_worker: usize,
}

/// Runs the stress (or the verification); an error says what differed.
pub fn stress(args: &StressArgs) -> Result<(), String> {
    if let Some(bad) = args.skip.iter().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown kind `{bad}` (one of {})",
            KINDS.join(", ")
        ));
    }
    if args.verify {
        let manifest = args.manifest.as_ref().expect("clap requires it");
        let n = verify(&args.dir, manifest)?;
        println!("{n} worker trees equal their manifests");
        return Ok(());
    }
    if let Some(dir) = &args.manifest {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let children = spawn_others(args)?;
    let config = Config {
        ops: args.ops,
        seed: args.seed,
        threads: args.threads,
        first_worker: args.first_worker,
        skip: args.skip.clone(),
        shared: !args.no_shared,
        manifest: args.manifest.clone(),
        ..Config::default()
    };
    let mine = run(&args.dir, &config);
    let mut failed = Vec::new();
    for (n, mut child) in children {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("process {n}: {status}")),
            Err(e) => failed.push(format!("process {n}: {e}")),
        }
    }
    let report = mine?;
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    println!(
        "{} operations ({} failed as the model said), {} tree checks: all as expected{}",
        report.ops,
        report.expected_errors,
        report.tree_checks,
        if args.processes > 1 {
            format!(" here and in {} more processes", args.processes - 1)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Starts processes 1.. of the run, this binary again with its own worker numbers.
fn spawn_others(args: &StressArgs) -> Result<Vec<(usize, std::process::Child)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    (1..args.processes)
        .map(|p| {
            let mut cmd = Command::new(&exe);
            cmd.arg("stress")
                .arg(&args.dir)
                .args(["--threads", &args.threads.to_string()])
                .args(["--ops", &args.ops.to_string()])
                .args(["--seed", &args.seed.to_string()])
                .args(["--first-worker", &(p * args.threads).to_string()]);
            if !args.skip.is_empty() {
                cmd.args(["--skip", &args.skip.join(",")]);
            }
            if args.no_shared {
                cmd.arg("--no-shared");
            }
            if let Some(m) = &args.manifest {
                cmd.arg("--manifest").arg(m);
            }
            cmd.spawn()
                .map(|child| (p, child))
                .map_err(|e| format!("starting process {p}: {e}"))
        })
        .collect()
}
