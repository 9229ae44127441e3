//! Daemon mode end to end: `nosefs mount` serves programs under `nosefs run --at MOUNTPOINT`
//! (many processes, one image) beside the kernel's FUSE requests. Shell work, make and git
//! compared with a kernel directory; concurrent appenders; the two paths seeing one file
//! system; another user's permissions; a killed client; a killed daemon. Needs /dev/fuse and
//! root (as CI has); otherwise each test says why it did not run.

#[path = "../common/mod.rs"]
mod common;

mod coherence;
mod connections;
mod databases;
mod failures;
mod locks;
mod mappings;
mod programs;

use common::text;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nosefs() -> &'static str {
    env!("CARGO_BIN_EXE_nosefs")
}

fn usable() -> bool {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let shim = Path::new(nosefs())
        .with_file_name("libnosefs_preload.so")
        .is_file();
    let ok = Path::new("/dev/fuse").exists() && root && shim;
    if !ok {
        eprintln!("skipped: needs /dev/fuse, root and the shim built");
    }
    ok
}

struct Mounted {
    /// Also every script's working directory: a script whose `cd "$D"` fails must not write
    /// into the checkout (a failing run once left its files in the crate's directory).
    scratch: tempfile::TempDir,
    image: PathBuf,
    mnt: PathBuf,
    plain: PathBuf,
}

fn mount_with(options: &[&str]) -> Mounted {
    let dir = tempfile::Builder::new()
        .prefix("nosefs-daemon")
        .tempdir_in("/dev/shm")
        .unwrap();
    let image = dir.path().join("image");
    let mnt = dir.path().join("mnt");
    let plain = dir.path().join("plain");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(&plain).unwrap();
    // Other users (allow_other) reach the mount point through it.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = Command::new(nosefs())
        .args(["mkfs", "--size", "256M"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs: {out:?}");
    let mut mount = Command::new(nosefs());
    mount.arg("mount");
    for o in options {
        mount.args(["-o", o]);
    }
    let out = mount.arg(&image).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "mount: {}", text(&out));
    Mounted {
        scratch: dir,
        image,
        mnt,
        plain,
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
    }
}

impl Mounted {
    /// `bash -c script` under the shim in daemon mode, with `$D` the mount point.
    fn shim_command(&self, script: &str) -> Command {
        let mut c = Command::new(nosefs());
        c.args(["run", "--at"])
            .arg(&self.mnt)
            .args(["--", "bash", "-c", script])
            .current_dir(self.scratch.path())
            .env("D", &self.mnt)
            .env("LC_ALL", "C")
            .env_remove("NOSEFS_IMAGE");
        c
    }

    fn run(&self, script: &str) -> Output {
        self.shim_command(script).output().unwrap()
    }

    fn run_plain(&self, script: &str) -> Output {
        Command::new("bash")
            .args(["-c", script])
            .current_dir(self.scratch.path())
            .env("D", &self.plain)
            .env("LC_ALL", "C")
            .output()
            .unwrap()
    }

    /// Unmounts (waiting for the server to finish) and checks the image.
    fn unmount_and_fsck(&self) {
        let out = Command::new("umount").arg(&self.mnt).output().unwrap();
        assert!(out.status.success(), "umount: {}", text(&out));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new(nosefs())
                .arg("fsck")
                .arg(&self.image)
                .output()
                .unwrap();
            let busy = String::from_utf8_lossy(&out.stderr).contains("in use");
            if !busy {
                assert!(out.status.success(), "fsck: {}", text(&out));
                return;
            }
            assert!(Instant::now() < deadline, "the server never let go");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The foreground server's pid.
    fn server_pid(&self) -> i32 {
        let out = Command::new("pgrep")
            .args([
                "-f",
                &format!("mount -f {} {}", self.image.display(), self.mnt.display()),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no server: {}", text(&out)))
    }
}

/// Runs `script` under the shim and on a kernel directory: same stdout, success, no stderr.
fn same_as_kernel(m: &Mounted, script: &str) -> String {
    let plain = m.run_plain(script);
    let ours = m.run(script);
    common::assert_same_as_kernel(&ours, &m.mnt, &plain, &m.plain)
}
