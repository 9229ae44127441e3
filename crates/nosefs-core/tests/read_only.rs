//! Read-only mounts: every change is EROFS, reads see what a read-write mount would, and the
//! image file is never written, not even by recovery of an image that was not unmounted cleanly.

mod common;

use common::OWNER;

use nosefs_core::error::{Errno, Result};
use nosefs_core::format::pinode::{S_IFCHR, S_IFREG};
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::{RenameFlags, SetAttr, ROOT_INO};

fn read_only() -> MountOptions {
    MountOptions {
        read_only: true,
        ..MountOptions::default()
    }
}

/// A file `a` with data, a directory `d`, a symlink `s`; left mounted (not cleanly unmounted)
/// when `clean` is false, so the next mount runs recovery.
fn build(path: &std::path::Path, clean: bool) -> u64 {
    let fs = Fs::mount(path, &MountOptions::default()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, OWNER, true).unwrap().ino;
    fs.write(a, 0, b"hello, read-only world").unwrap();
    fs.fsync(a).unwrap();
    fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    fs.symlink(ROOT_INO, b"s", b"a", OWNER).unwrap();
    if clean {
        drop(fs.unmount());
    } else {
        drop(fs); // a crash: no unmount
    }
    a
}

fn is_erofs<T: std::fmt::Debug>(what: &str, result: Result<T>) {
    match result {
        Err(e) => assert_eq!(e.errno(), Errno::EROFS, "{what}: {e}"),
        Ok(v) => panic!("{what} succeeded on a read-only mount: {v:?}"),
    }
}

#[test]
fn every_change_is_erofs_and_the_image_is_untouched() {
    let t = common::fresh_image(8 << 20);
    let a = build(&t.path, true);
    let before = std::fs::read(&t.path).unwrap();
    let fs = Fs::mount(&t.path, &read_only()).unwrap();
    assert!(fs.is_read_only());
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    is_erofs("create", fs.create(ROOT_INO, b"new", 0o644, OWNER, true));
    is_erofs("mkdir", fs.mkdir(ROOT_INO, b"new", 0o755, OWNER));
    is_erofs(
        "mknod",
        fs.mknod(ROOT_INO, b"new", S_IFCHR | 0o600, 0x0103, OWNER),
    );
    is_erofs("symlink", fs.symlink(ROOT_INO, b"new", b"a", OWNER));
    is_erofs("link", fs.link(a, ROOT_INO, b"new"));
    is_erofs("unlink", fs.unlink(ROOT_INO, b"a"));
    is_erofs("rmdir", fs.rmdir(ROOT_INO, b"d"));
    is_erofs(
        "rename",
        fs.rename(ROOT_INO, b"a", d, b"a", RenameFlags::default()),
    );
    let chmod = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    is_erofs("setattr", fs.setattr(a, &chmod));
    is_erofs("write", fs.write(a, 0, b"x"));
    is_erofs("append", fs.append(a, b"x"));
    is_erofs("truncate", fs.truncate(a, 0));
    // What exists answers as on a read-write mount (Linux checks the name before the mount).
    let existing = fs.create(ROOT_INO, b"a", 0o644, OWNER, false).unwrap();
    assert_eq!((existing.ino, existing.mode & S_IFREG), (a, S_IFREG));
    assert_eq!(
        fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap_err().errno(),
        Errno::EEXIST
    );
    let mut buf = [0u8; 64];
    let n = fs.read(a, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello, read-only world");
    assert_eq!(
        fs.readlink(fs.lookup(ROOT_INO, b"s").unwrap().ino).unwrap(),
        b"a"
    );
    fs.fsync(a).unwrap();
    drop(fs.unmount());
    assert!(
        std::fs::read(&t.path).unwrap() == before,
        "a read-only mount and unmount wrote the image"
    );
}

#[test]
fn recovery_of_a_crashed_image_stays_in_memory() {
    let t = common::fresh_image(8 << 20);
    let a = build(&t.path, false);
    let before = std::fs::read(&t.path).unwrap();
    let fs = Fs::mount(&t.path, &read_only()).unwrap();
    assert!(!fs.mount_report().was_clean, "the image was left mounted");
    let mut buf = [0u8; 64];
    let n = fs.read(a, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello, read-only world");
    assert!(fs.lookup(ROOT_INO, b"d").unwrap().is_dir());
    drop(fs.unmount());
    assert!(
        std::fs::read(&t.path).unwrap() == before,
        "a read-only mount of a crashed image wrote it"
    );
    // The image still needs its recovery, and a read-write mount does it.
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    assert!(!fs.mount_report().was_clean);
    assert_eq!(fs.lookup(ROOT_INO, b"a").unwrap().ino, a);
    drop(fs.unmount());
}

#[test]
fn a_read_only_mount_shares_the_image_with_readers_not_writers() {
    let t = common::fresh_image(8 << 20);
    build(&t.path, true);
    let first = Fs::mount(&t.path, &read_only()).unwrap();
    let second = Fs::mount(&t.path, &read_only()).unwrap();
    assert!(
        Fs::mount(&t.path, &MountOptions::default()).is_err(),
        "a read-write mount while read-only mounts hold the image"
    );
    drop((first.unmount(), second.unmount()));
    drop(
        Fs::mount(&t.path, &MountOptions::default())
            .unwrap()
            .unmount(),
    );
}
