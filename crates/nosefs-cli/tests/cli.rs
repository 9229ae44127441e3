//! The `nosefs` command end to end: exit codes, messages, and no panics on bad input.

use std::path::Path;
use std::process::{Command, Output};

fn nosefs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nosefs"))
        .args(args)
        .output()
        .expect("nosefs runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_no_panic(out: &Output) {
    assert!(!text(out).contains("panicked"), "{}", text(out));
    assert_ne!(out.status.code(), Some(101), "{}", text(out));
}

fn shm() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap()
}

fn mkfs(path: &Path, size: &str) {
    let out = nosefs(&["mkfs", path.to_str().unwrap(), "--size", size]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn mkfs_then_fsck_is_clean_and_info_prints_the_zones() {
    let dir = shm();
    let img = dir.path().join("t.img");
    mkfs(&img, "64M");
    let out = nosefs(&["fsck", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("clean"));
    let info = nosefs(&["info", img.to_str().unwrap()]);
    assert!(info.status.success());
    let shown = text(&info);
    for zone in [
        "dir journal",
        "file journal",
        "hash table",
        "pinode table",
        "long names",
        "extent table",
        "bitmap",
        "data",
    ] {
        assert!(shown.contains(zone), "info lacks {zone}:\n{shown}");
    }
    assert!(
        shown.contains("1 of 8191 in use"),
        "root pinode counted:\n{shown}"
    );
    // /dev/shm is a tmpfs: info says which pages back the image there.
    let pages = shown.lines().find(|l| l.starts_with("pages "));
    assert!(
        pages.is_some_and(|l| l.contains("KiB (tmpfs /dev/shm") || l.contains("MiB where")),
        "no pages line:\n{shown}"
    );
}

#[test]
fn overwritten_magic_fails_fsck_with_a_message_and_repair_restores_it() {
    let dir = shm();
    let img = dir.path().join("t.img");
    mkfs(&img, "16M");
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[..8].copy_from_slice(&[0; 8]);
    std::fs::write(&img, &bytes).unwrap();
    let path = img.to_str().unwrap();
    let out = nosefs(&["fsck", path]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(text(&out).contains("superblock.magic"), "{}", text(&out));
    let out = nosefs(&["info", path]);
    assert_no_panic(&out);
    assert!(!out.status.success());
    assert!(text(&out).contains("not a noseFS image"), "{}", text(&out));
    let out = nosefs(&["fsck", "--repair", path]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(nosefs(&["fsck", path]).status.code(), Some(0));
}

#[test]
fn fsck_upgrade_gives_an_old_image_moves_once() {
    let dir = shm();
    let img = dir.path().join("t.img");
    let path = img.to_str().unwrap();
    let out = nosefs(&["mkfs", path, "--size", "16M", "--no-moves"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = nosefs(&["fsck", "--upgrade", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("upgraded"), "{}", text(&out));
    let out = nosefs(&["fsck", "--upgrade", path]);
    assert!(text(&out).contains("has every feature"), "{}", text(&out));
    assert_eq!(nosefs(&["fsck", path]).status.code(), Some(0));
    let out = nosefs(&["fsck", "--upgrade", "--repair", path]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "one or the other: {}",
        text(&out)
    );
}

#[test]
fn both_superblocks_gone_is_an_operational_error() {
    let dir = shm();
    let img = dir.path().join("t.img");
    mkfs(&img, "16M");
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[..8].copy_from_slice(&[0; 8]);
    bytes[4096..4104].copy_from_slice(&[0; 8]);
    std::fs::write(&img, &bytes).unwrap();
    let out = nosefs(&["fsck", img.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out));
    assert_no_panic(&out);
}

#[test]
fn bad_input_gets_one_line_errors_not_panics() {
    let dir = shm();
    let missing = dir.path().join("missing.img");
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, vec![7u8; 2 << 20]).unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["info", missing.to_str().unwrap()],
        vec!["fsck", missing.to_str().unwrap()],
        vec!["info", foreign.to_str().unwrap()],
        vec!["fsck", foreign.to_str().unwrap()],
        vec!["info", empty.to_str().unwrap()],
        vec!["fsck", empty.to_str().unwrap()],
        vec!["info", "/dev/null"],
        vec!["mkfs", empty.to_str().unwrap()],
        vec!["mkfs", "/nonexistent-dir/x.img", "--size", "16M"],
        vec!["mkfs", missing.to_str().unwrap(), "--size", "100K"],
        vec![
            "mkfs",
            missing.to_str().unwrap(),
            "--size",
            "2M",
            "--pinodes",
            "1000000",
        ],
        vec!["mkfs", missing.to_str().unwrap(), "--size", "lots"],
    ];
    for args in cases {
        let out = nosefs(&args);
        assert_no_panic(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.trim().is_empty(), "{args:?}: no message");
        if args[0] != "mkfs" || !args.contains(&"lots") {
            assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        }
    }
    assert_eq!(
        nosefs(&["fsck", missing.to_str().unwrap()]).status.code(),
        Some(8)
    );
    assert!(!missing.exists(), "a failed mkfs leaves no file behind");
}

#[test]
fn an_image_in_use_is_refused() {
    let dir = shm();
    let img = dir.path().join("t.img");
    mkfs(&img, "16M");
    let _held = nosefs_core::pmem::Region::open(&img, &Default::default()).unwrap();
    for cmd in ["info", "fsck"] {
        let out = nosefs(&[cmd, img.to_str().unwrap()]);
        assert!(text(&out).contains("in use"), "{cmd}: {}", text(&out));
        assert!(!out.status.success());
    }
    let out = nosefs(&["mkfs", img.to_str().unwrap(), "--size", "16M"]);
    assert!(text(&out).contains("in use"), "{}", text(&out));
}

#[test]
fn reformatting_keeps_nothing_of_the_old_image() {
    let dir = shm();
    let img = dir.path().join("t.img");
    mkfs(&img, "16M");
    let first = nosefs(&["info", img.to_str().unwrap()]);
    mkfs(&img, "32M");
    let second = nosefs(&["info", img.to_str().unwrap()]);
    assert!(text(&second).contains("32.00 MiB"), "{}", text(&second));
    assert_ne!(
        text(&first).lines().nth(1),
        text(&second).lines().nth(1),
        "a new uuid"
    );
    assert_eq!(
        nosefs(&["fsck", img.to_str().unwrap()]).status.code(),
        Some(0)
    );
}

#[test]
fn a_report_into_a_closed_pipe_ends_quietly_not_in_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    // The reader is gone before the command starts, as with `nosefs bench --list-targets | head`
    // once head has what it wants.
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_nosefs"))
        .args(["bench", "--list-targets"])
        .stdout(writer)
        .output()
        .expect("nosefs runs");
    assert_no_panic(&out);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {}",
        out.status,
        text(&out)
    );
}
