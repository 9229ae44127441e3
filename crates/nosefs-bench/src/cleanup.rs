//! Undoing what the harness set up (scratch mounts, images, directories), also when it is
//! interrupted.
//!
//! Every piece of setup registers how to undo itself and unregisters once its owner has undone it
//! normally (on drop). On SIGINT, SIGTERM or SIGHUP a watcher thread undoes whatever is still
//! registered, newest first, and exits with status 130, so that Ctrl-C leaves nothing mounted,
//! attached or written behind. Benchmark threads may still hold files open on a scratch mount at
//! that moment, so unmounting falls back to a lazy unmount; the loop device detaches itself
//! (`mount -o loop` sets autoclear) once the process is gone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

/// One thing to undo.
#[derive(Debug, Clone)]
pub enum Undo {
    /// Unmount this mount point, then remove the (empty) directory.
    Unmount(PathBuf),
    /// Remove this file.
    RemoveFile(PathBuf),
    /// Remove this directory and everything in it.
    RemoveTree(PathBuf),
}

static PENDING: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A registered undo step; dropping it unregisters the step (its owner has undone it).
#[derive(Debug)]
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|(id, _)| *id != self.0);
    }
}

/// Registers `undo` to run if the process is interrupted before the returned guard drops.
pub fn register(undo: Undo) -> Registered {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    PENDING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((id, undo));
    Registered(id)
}

/// Starts the watcher thread (once per process).
pub fn install_interrupt_handler() -> std::io::Result<()> {
    static INSTALLED: Once = Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(mut signals) => {
                std::thread::spawn(move || {
                    if let Some(signal) = signals.forever().next() {
                        eprintln!("\nnosefs bench: signal {signal}, cleaning up");
                        undo_all();
                        std::process::exit(130);
                    }
                });
            }
            Err(e) => result = Err(e),
        }
    });
    result
}

/// Undoes every registered step, newest first.
pub fn undo_all() {
    let steps: Vec<Undo> = {
        let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        pending.drain(..).rev().map(|(_, undo)| undo).collect()
    };
    for step in steps {
        if let Err(e) = run(&step) {
            eprintln!("nosefs bench: cleanup: {e}");
        }
    }
}

/// Performs one undo step.
pub fn run(step: &Undo) -> Result<(), String> {
    match step {
        Undo::Unmount(dir) => unmount(dir),
        Undo::RemoveFile(path) => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("cannot remove {}: {e}", path.display()))
            }
            _ => Ok(()),
        },
        Undo::RemoveTree(path) => match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("cannot remove {}: {e}", path.display()))
            }
            _ => Ok(()),
        },
    }
}

/// Unmounts `dir` (lazily if it is busy) and removes the mount point.
fn unmount(dir: &Path) -> Result<(), String> {
    let status = |lazy: bool| {
        let mut cmd = Command::new("umount");
        if lazy {
            cmd.arg("-l");
        }
        cmd.arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !status(false) && !status(true) {
        return Err(format!("cannot unmount {}", dir.display()));
    }
    std::fs::remove_dir(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}
