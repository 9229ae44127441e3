//! `nosefs mount` end to end: programs use the mount through ordinary system calls; unmounting
//! leaves a clean image; errors are clear; a SIGKILLed server leaves an image that the next mount
//! recovers with every fsynced file intact. Needs /dev/fuse and root (as CI has); otherwise each
//! test says why it did not run.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn nosefs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nosefs"))
}

fn fuse_usable() -> bool {
    let ok = Path::new("/dev/fuse").exists() && rustix_is_root();
    if !ok {
        eprintln!("skipped: needs /dev/fuse and root");
    }
    ok
}

fn rustix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

struct Setup {
    _dir: tempfile::TempDir,
    image: PathBuf,
    mnt: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = dir.path().join("fs.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = nosefs()
        .args(["mkfs", "--size", "128M"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    Setup {
        _dir: dir,
        image,
        mnt,
    }
}

fn mount(s: &Setup) -> Output {
    nosefs()
        .arg("mount")
        .arg(&s.image)
        .arg(&s.mnt)
        .output()
        .unwrap()
}

fn umount(mnt: &Path) {
    let out = Command::new("umount").arg(mnt).output().unwrap();
    assert!(out.status.success(), "umount: {out:?}");
}

/// fsck, retried while the server that just lost its mount still holds the image.
fn fsck(image: &Path) -> Output {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = nosefs().arg("fsck").arg(image).output().unwrap();
        let in_use = String::from_utf8_lossy(&out.stderr).contains("in use");
        if !in_use || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn programs_use_the_mount_and_unmounting_leaves_a_clean_image() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    let out = mount(&s);
    assert!(out.status.success(), "{out:?}");
    let m = &s.mnt;
    std::fs::write(m.join("a"), b"hello").unwrap();
    std::fs::create_dir(m.join("d")).unwrap();
    std::fs::rename(m.join("a"), m.join("d/b")).unwrap();
    std::os::unix::fs::symlink("d/b", m.join("s")).unwrap();
    std::fs::hard_link(m.join("d/b"), m.join("h")).unwrap();
    assert_eq!(std::fs::read(m.join("s")).unwrap(), b"hello");
    assert_eq!(std::fs::metadata(m.join("h")).unwrap().nlink(), 2);
    std::fs::set_permissions(m.join("h"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(m.join("data"))
        .unwrap();
    let block: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    f.write_all(&block).unwrap();
    f.write_all_at(b"XYZ", 123_457).unwrap();
    f.sync_all().unwrap();
    f.set_len(500_000).unwrap();
    drop(f);
    let mut want = block.clone();
    want[123_457..123_460].copy_from_slice(b"XYZ");
    want.truncate(500_000);
    assert_eq!(std::fs::read(m.join("data")).unwrap(), want);
    let mut names: Vec<String> = std::fs::read_dir(m)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "data", "h", "s"]);
    assert_eq!(
        std::fs::remove_dir(m.join("d")).unwrap_err().raw_os_error(),
        Some(libc_enotempty())
    );
    umount(m);
    let out = fsck(&s.image);
    assert!(out.status.success(), "fsck after umount: {out:?}");
    let out = mount(&s);
    assert!(out.status.success(), "mount: {out:?}");
    assert_eq!(std::fs::read(m.join("data")).unwrap(), want);
    assert_eq!(std::fs::read(m.join("h")).unwrap(), b"hello");
    assert_eq!(
        std::fs::metadata(m.join("h")).unwrap().mode() & 0o7777,
        0o600
    );
    umount(m);
    assert!(fsck(&s.image).status.success());
}

fn libc_enotempty() -> i32 {
    39
}

#[test]
fn errors_are_clear() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    let missing = nosefs()
        .arg("mount")
        .arg(s.image.with_extension("missing"))
        .arg(&s.mnt)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let why = String::from_utf8_lossy(&missing.stderr);
    assert!(why.contains("missing"), "{why}");
    let no_dir = nosefs()
        .arg("mount")
        .arg(&s.image)
        .arg(s.mnt.join("nope"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&no_dir.stderr).contains("mountpoint"));
    let out = mount(&s);
    assert!(out.status.success(), "mount: {out:?}");
    let busy = mount(&s);
    assert!(!busy.status.success());
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("busy"),
        "{busy:?}"
    );
    let other = s.mnt.with_file_name("mnt2");
    std::fs::create_dir(&other).unwrap();
    let in_use = nosefs()
        .arg("mount")
        .arg(&s.image)
        .arg(&other)
        .output()
        .unwrap();
    assert!(!in_use.status.success());
    assert!(
        String::from_utf8_lossy(&in_use.stderr).contains("in use"),
        "{in_use:?}"
    );
    let bad_option = nosefs()
        .args(["mount", "-o", "frobnicate"])
        .arg(&s.image)
        .arg(&other)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad_option.stderr).contains("unknown option"));
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

/// Waits until the server that served a mount of `image` has let go of it (its lock, shared or
/// exclusive, is gone), so the image's bytes are final.
fn released(image: &Path) {
    use rustix::fs::{flock, FlockOperation};
    let file = std::fs::File::open(image).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        assert!(
            Instant::now() < deadline,
            "the server never let go of the image"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn read_only_mounts_never_write_the_image_and_errors_ro_serves_a_damaged_one() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    std::fs::write(s.mnt.join("f"), b"kept").unwrap();
    umount(&s.mnt);
    released(&s.image);
    let clean = std::fs::read(&s.image).unwrap();
    let ro = nosefs()
        .args(["mount", "-o", "ro"])
        .arg(&s.image)
        .arg(&s.mnt)
        .output()
        .unwrap();
    assert!(ro.status.success(), "{ro:?}");
    assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"kept");
    let refused = std::fs::write(s.mnt.join("g"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc_erofs()), "{refused}");
    umount(&s.mnt);
    released(&s.image);
    assert!(
        std::fs::read(&s.image).unwrap() == clean,
        "-o ro wrote the image"
    );

    // Damage: the primary superblock's magic is gone (the backup is intact).
    let mut damaged = clean.clone();
    damaged[..8].copy_from_slice(&[0; 8]);
    std::fs::write(&s.image, &damaged).unwrap();
    let plain = mount(&s);
    assert!(
        !plain.status.success(),
        "a plain mount took a damaged image"
    );
    let why = String::from_utf8_lossy(&plain.stderr);
    assert!(
        why.contains("fsck") || why.contains("not a noseFS"),
        "{why}"
    );
    let out = nosefs()
        .args(["mount", "-o", "errors=ro"])
        .arg(&s.image)
        .arg(&s.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("read-only") && said.contains("fsck --repair"),
        "errors=ro says nothing of the damage: {said}"
    );
    assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"kept");
    let refused = std::fs::write(s.mnt.join("g"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc_erofs()), "{refused}");
    umount(&s.mnt);
    released(&s.image);
    assert!(
        std::fs::read(&s.image).unwrap() == damaged,
        "errors=ro wrote the damaged image"
    );
    let repair = nosefs()
        .args(["fsck", "--repair"])
        .arg(&s.image)
        .output()
        .unwrap();
    assert_eq!(repair.status.code(), Some(1), "{repair:?}");
    assert!(mount(&s).status.success(), "the repaired image mounts");
    assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"kept");
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

fn libc_erofs() -> i32 {
    30
}

/// A fresh tmpfs mounted beside the setup's mount point, to run the same script on (the caller
/// unmounts it).
fn tmpfs_beside(s: &Setup) -> PathBuf {
    let tmpfs = s.mnt.with_file_name("tmpfs");
    std::fs::create_dir(&tmpfs).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&tmpfs)
        .status()
        .unwrap();
    assert!(mounted.success());
    tmpfs
}

/// Runs `script` with `sh -c` in `dir`; its stdout.
fn sh_in(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn holes_are_punched_found_and_copied_as_on_tmpfs() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    let tmpfs = tmpfs_beside(&s);
    // 1 MiB of data, 1 MiB of zeros, 1 MiB of data; then a punched hole, dug holes, sparse
    // copies; lseek's answers; du's block counts; the bytes.
    let script = r#"set -e
python3 -c "
with open('f', 'wb') as f:
    f.write(b'a' * 1048576); f.write(bytes(1048576)); f.write(b'b' * 1048576)
"
cp --sparse=always f g
fallocate --punch-hole -o 4096 -l 65536 f
cp f f2
fallocate --dig-holes f2
cp --sparse=always f h
python3 -c "
import os
for name, at in (('f', 0), ('f', 70000), ('g', 0), ('g', 1048576), ('f2', 5000)):
    fd = os.open(name, os.O_RDONLY)
    print(name, at, os.lseek(fd, at, os.SEEK_DATA), os.lseek(fd, at, os.SEEK_HOLE))
    os.close(fd)
fd = os.open('f', os.O_RDONLY)
try:
    os.lseek(fd, 3145728, os.SEEK_DATA)
except OSError as e:
    print('past the end:', e.strerror)
"
du -k f f2 g h
md5sum f f2 g h
"#;
    let ours = sh_in(&s.mnt, script);
    let theirs = sh_in(&tmpfs, script);
    let _ = Command::new("umount").arg(&tmpfs).status();
    assert_eq!(ours, theirs, "noseFS:\n{ours}\ntmpfs:\n{theirs}");
    assert!(ours.contains("g 0 0 1048576"), "{ours}");
    // ZERO_RANGE (tmpfs has none; ext4's answer): zeros, the size kept; and preallocation
    // grows the size, KEEP_SIZE does not.
    let out = sh_in(
        &s.mnt,
        "set -e; fallocate -z -o 10 -l 100 h; od -A d -t x1 -j 8 -N 4 h | head -1; \
         fallocate -l 8M big; fallocate -n -l 16M big; stat -c %s h big",
    );
    assert!(out.starts_with("0000008 61 61 00 00\n"), "{out}");
    assert!(out.ends_with("3145728\n8388608\n"), "{out}");
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

#[test]
fn preallocated_space_is_still_there_after_a_remount() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    sh_in(
        &s.mnt,
        "set -e; touch kept; fallocate -n -l 8M kept; fallocate -l 1M grown",
    );
    umount(&s.mnt);
    released(&s.image);
    assert!(mount(&s).status.success());
    // Another file takes every free block; the reserved files still take their 9 MiB, and a
    // file with no reservation gets ENOSPC.
    let out = sh_in(
        &s.mnt,
        "dd if=/dev/zero of=fill bs=1M 2>/dev/null; \
         dd if=/dev/zero of=other bs=1M count=1 conv=fsync 2>&1 | grep -c 'No space' ; \
         dd if=/dev/zero of=kept bs=1M count=8 conv=notrunc,fsync 2>/dev/null && echo kept; \
         dd if=/dev/zero of=grown bs=1M count=1 conv=notrunc,fsync 2>/dev/null && echo grown; \
         stat -c %s kept grown; rm fill other",
    );
    assert_eq!(out, "1\nkept\ngrown\n8388608\n1048576\n");
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

#[test]
fn the_compactor_keeps_contents_and_lets_the_image_go() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    let out = nosefs()
        .arg("mount")
        .arg(&s.image)
        .arg(&s.mnt)
        .args(["-o", "compactor"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Small random overwrites with fsync crowd windows; the copy in memory says what the file
    // must hold, read back while the compactor works and after a remount.
    let script = r#"
import os, random, hashlib
random.seed(5)
size = 1 << 20
model = bytearray(size)
fd = os.open('f', os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, bytes(size)); os.fsync(fd)
for i in range(4000):
    at = random.randrange(size - 300); n = random.randrange(1, 300)
    data = bytes([i % 251]) * n
    os.pwrite(fd, data, at); model[at:at + n] = data; os.fsync(fd)
os.close(fd)
with open('f', 'rb') as f:
    assert f.read() == bytes(model)
print(hashlib.md5(model).hexdigest())
"#;
    let digest = sh_in(&s.mnt, &format!("python3 - <<'PY'\n{script}\nPY"));
    assert_eq!(digest.len(), 33, "{digest}");
    umount(&s.mnt);
    released(&s.image);
    assert!(fsck(&s.image).status.success());
    assert!(mount(&s).status.success());
    let again =
        "python3 -c \"import hashlib; print(hashlib.md5(open('f','rb').read()).hexdigest())\"";
    assert_eq!(sh_in(&s.mnt, again), digest);
    umount(&s.mnt);
}

#[test]
fn extended_attributes_and_acls_behave_as_on_tmpfs() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    // allow_other: the script reads as `nobody`, whom the ACLs name.
    let out = nosefs()
        .args(["mount", "-o", "allow_other"])
        .arg(&s.image)
        .arg(&s.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let tmpfs = tmpfs_beside(&s);
    for dir in [&s.mnt, &tmpfs] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // setfattr/getfattr in every namespace; python's os.*xattr with their errors and limits;
    // setfacl/getfacl with named entries, the mask, chmod, default ACLs inherited by a file and
    // a directory; cp -a and rsync -aAX carrying both; ACLs enforced for another user.
    let script = format!(
        "D=.\n{}\n{}\n{}",
        common::XATTR_SCRIPT,
        common::XATTR_RSYNC_SCRIPT,
        common::XATTR_OTHER_USER_SCRIPT
    );
    let script = script.as_str();
    let ours = sh_in(&s.mnt, script);
    let theirs = sh_in(&tmpfs, script);
    let _ = Command::new("umount").arg(&tmpfs).status();
    assert_eq!(ours, theirs, "noseFS:\n{ours}\ntmpfs:\n{theirs}");
    assert!(ours.contains("user:1234:rw-\t#effective:r--"), "{ours}");
    assert!(
        ours.ends_with("Permission denied\ndata\nnot readable\n"),
        "{ours}"
    );
    let listing = "getfattr -n user.colour --only-values r/f; getfacl -n -c r/f r/d";
    let before = sh_in(&s.mnt, listing);
    umount(&s.mnt);
    let out = fsck(&s.image);
    assert!(out.status.success(), "{out:?}");
    // The attributes survive a remount.
    assert!(mount(&s).status.success());
    assert_eq!(sh_in(&s.mnt, listing), before);
    assert!(
        before.starts_with("blueuser::rw-\nuser:65534:---\n"),
        "{before}"
    );
    umount(&s.mnt);
}

/// name_to_handle_at(argv[1]); run argv[3] (dropping the kernel's caches); open_by_handle_at on
/// the mount argv[2]; print what it reads.
const BY_HANDLE_C: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
/* name_to_handle_at(path), then (after the caller drops caches) open_by_handle_at and read. */
int main(int argc, char **argv) {
    struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
    h->handle_bytes = MAX_HANDLE_SZ;
    int mount_id;
    if (name_to_handle_at(AT_FDCWD, argv[1], h, &mount_id, 0) != 0) { perror("name_to_handle_at"); return 1; }
    int mfd = open(argv[2], O_RDONLY | O_DIRECTORY);
    if (argc > 3) system(argv[3]);
    int fd = open_by_handle_at(mfd, h, O_RDONLY);
    if (fd < 0) { printf("open_by_handle_at: %s\n", strerror(errno)); return 0; }
    char buf[64] = {0};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    printf("read %zd: %s", n, buf);
    return 0;
}
"#;

#[test]
fn files_open_by_handle_after_the_kernel_forgot_them() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    let dir = s.mnt.with_file_name("tools");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("byhandle.c"), BY_HANDLE_C).unwrap();
    let built = Command::new("cc")
        .arg("-o")
        .arg(dir.join("byhandle"))
        .arg(dir.join("byhandle.c"))
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    std::fs::create_dir(s.mnt.join("d")).unwrap();
    std::fs::write(s.mnt.join("d/g"), "deep\n").unwrap();
    // NFS servers keep handles across the kernel's cache: drop it between the two calls, so the
    // kernel must find the inode by its number alone.
    let out = Command::new(dir.join("byhandle"))
        .arg(s.mnt.join("d/g"))
        .arg(&s.mnt)
        .arg("sync; echo 2 > /proc/sys/vm/drop_caches")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "read 5: deep\n",
        "{out:?}"
    );
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

#[test]
fn a_directory_removed_while_open_is_fstat_able_as_on_tmpfs() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    let script = format!("D=.\n{}", common::REMOVED_DIR_SCRIPT);
    let out = sh_in(&s.mnt, &script);
    assert_eq!(out, "0 0o40750\n[]\n0 0o40700\n[]\n['over']\n");
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

#[test]
fn a_listing_that_renames_what_it_reads_ends() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    // Each renamed name gets a new place in the directory after the cursor; before the listing
    // stopped at the end it had when opened, this never ended (15,001 entries and counting).
    let out = sh_in(
        &s.mnt,
        r#"mkdir d && cd d && python3 -c "
import os
for i in range(5000):
    open('f%d' % i, 'w').close()
seen = set(); n = 0
for e in os.scandir('.'):
    n += 1
    seen.add(e.name)
    os.rename(e.name, e.name + '.renamed')
    if n > 20000:
        break
print(n, len([x for x in seen if not x.endswith('.renamed')]), len(os.listdir('.')))
""#,
    );
    assert_eq!(
        out, "5000 5000 5000\n",
        "entries listed, originals seen, names after"
    );
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

#[test]
fn reads_update_access_times_by_the_mount_option() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    // An atime older than the file's mtime; then a read (cat); then the atime again.
    let probe = "python3 -c \"
import os, subprocess
os.utime('f', ns=(10**9, os.stat('f').st_mtime_ns))
subprocess.run(['cat', 'f'], stdout=subprocess.DEVNULL, check=True)
st = os.stat('f')
print('moved' if st.st_atime_ns >= st.st_mtime_ns else 'kept')
\"";
    for (option, expect) in [
        ("relatime", "moved"),
        ("noatime", "kept"),
        ("strictatime", "moved"),
    ] {
        let out = nosefs()
            .args(["mount", "-o", option])
            .arg(&s.image)
            .arg(&s.mnt)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        if !s.mnt.join("f").exists() {
            std::fs::write(s.mnt.join("f"), b"data").unwrap();
        }
        assert_eq!(sh_in(&s.mnt, probe).trim(), expect, "-o {option}");
        umount(&s.mnt);
        released(&s.image);
    }
    assert!(fsck(&s.image).status.success());
}

#[test]
fn device_nodes_open_with_dev_and_not_without() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    for (options, opens) in [(None, false), (Some("dev"), true)] {
        let mut cmd = nosefs();
        cmd.arg("mount");
        if let Some(o) = options {
            cmd.args(["-o", o]);
        }
        let out = cmd.arg(&s.image).arg(&s.mnt).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let null = s.mnt.join("null");
        if !null.exists() {
            let made = Command::new("mknod")
                .arg(&null)
                .args(["c", "1", "3"])
                .status();
            assert!(made.unwrap().success());
        }
        let wrote = std::fs::write(&null, b"gone");
        assert_eq!(wrote.is_ok(), opens, "-o {options:?}: {wrote:?}");
        umount(&s.mnt);
        released(&s.image);
    }
    assert!(fsck(&s.image).status.success());
}

#[test]
fn a_setgid_directory_passes_its_group_on() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    let d = s.mnt.join("shared");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, None, Some(12345)).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2775)).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("file"), b"x").unwrap();
    std::os::unix::fs::symlink("file", d.join("link")).unwrap();
    let sub = std::fs::metadata(d.join("sub")).unwrap();
    // As tmpfs and ext4: the group, and for a directory the set-group-id bit too.
    assert_eq!((sub.gid(), sub.mode() & 0o2000), (12345, 0o2000), "mkdir");
    let file = std::fs::metadata(d.join("file")).unwrap();
    assert_eq!((file.gid(), file.mode() & 0o2000), (12345, 0), "create");
    let link = std::fs::symlink_metadata(d.join("link")).unwrap();
    assert_eq!(link.gid(), 12345, "symlink");
    std::fs::create_dir(d.join("sub/deeper")).unwrap();
    let deeper = std::fs::metadata(d.join("sub/deeper")).unwrap();
    assert_eq!(
        (deeper.gid(), deeper.mode() & 0o2000),
        (12345, 0o2000),
        "inherited again"
    );
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

#[test]
fn a_killed_server_loses_no_fsynced_file() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    let mut server = nosefs()
        .args(["mount", "-f"])
        .arg(&s.image)
        .arg(&s.mnt)
        .spawn()
        .unwrap();
    let before = std::fs::metadata(s.mnt.parent().unwrap()).unwrap().dev();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(&s.mnt).unwrap().dev() == before {
        assert!(Instant::now() < deadline, "mount did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut synced = Vec::new();
    for i in 0..60u32 {
        let path = s.mnt.join(format!("f{i}"));
        let mut f = std::fs::File::create(&path).unwrap();
        let data = vec![(i % 251) as u8; 1000 + 777 * i as usize];
        f.write_all(&data).unwrap();
        if i % 3 == 0 {
            f.sync_all().unwrap();
            synced.push((path, data));
        }
    }
    // Unsynced writes in flight when the server dies.
    let mut f = std::fs::File::create(s.mnt.join("unsynced")).unwrap();
    f.write_all(&[7u8; 100_000]).unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let lazy = Command::new("umount")
        .arg("-l")
        .arg(&s.mnt)
        .output()
        .unwrap();
    assert!(lazy.status.success(), "{lazy:?}");
    let out = fsck(&s.image);
    assert!(out.status.success(), "fsck after SIGKILL: {out:?}");
    let out = mount(&s);
    assert!(out.status.success(), "mount: {out:?}");
    for (path, data) in &synced {
        let mut got = Vec::new();
        std::fs::File::open(path)
            .unwrap()
            .read_to_end(&mut got)
            .unwrap();
        assert!(got == *data, "{} lost fsynced data", path.display());
    }
    umount(&s.mnt);
    assert!(fsck(&s.image).status.success());
}

/// overlayfs with the mount as its upper layer (containers' layout): FUSE dentries count as
/// remote, so overlayfs demands RENAME_WHITEOUT of them; deletions and renames of lower files
/// leave whiteouts (character devices 0:0) in the upper layer, and the merged view reads as
/// the same operations on tmpfs read.
#[test]
fn overlayfs_mounts_with_the_mount_as_its_upper_layer() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    let tmpfs = tmpfs_beside(&s);
    let script = |upper_root: &Path| {
        format!(
            r#"set -e
rm -rf lower merged; mkdir -p lower/dir merged {up}/upper {up}/work
echo low > lower/l; echo low2 > lower/dir/x
mount -t overlay overlay -o lowerdir=lower,upperdir={up}/upper,workdir={up}/work merged
cd merged
echo new > n; echo more >> l; rm dir/x; mv l l2; mkdir nd
ls -R; cat l2
cd ..; umount merged
stat -c '%F %t:%T' {up}/upper/l {up}/upper/dir/x
"#,
            up = upper_root.display()
        )
    };
    let work = s.mnt.with_file_name("overlay");
    std::fs::create_dir(&work).unwrap();
    let ours = sh_in(&work, &script(&s.mnt));
    let theirs = sh_in(&work, &script(&tmpfs));
    assert_eq!(ours, theirs);
    assert!(
        ours.contains("character special file 0:0\ncharacter special file 0:0\n"),
        "{ours}"
    );
    let _ = Command::new("umount").arg(&tmpfs).status();
    umount(&s.mnt);
    let out = fsck(&s.image);
    assert!(out.status.success(), "{out:?}");
}

/// O_TMPFILE through the mount (FUSE_TMPFILE): an unnamed file takes data, a link with
/// AT_EMPTY_PATH names it, O_EXCL keeps it unnameable, an unnamed file is gone at its close,
/// and a read-only one is refused: each answer as on tmpfs. The named file and its data are
/// there after a remount and the image is clean.
#[test]
fn o_tmpfile_works_on_the_mount_as_on_tmpfs() {
    if !fuse_usable() {
        return;
    }
    let s = setup();
    assert!(mount(&s).status.success());
    let tmpfs = tmpfs_beside(&s);
    let script = r#"python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def flink(fd, name):
    return 0 if libc.linkat(fd, b'', -100, name.encode(), 0x1000) == 0 else ctypes.get_errno()
fd = os.open('.', os.O_TMPFILE | os.O_RDWR, 0o640)
os.write(fd, b'hello tmpfile')
print('unnamed nlink', os.fstat(fd).st_nlink, oct(os.fstat(fd).st_mode))
print('flink', flink(fd, 'named'), 'nlink', os.fstat(fd).st_nlink)
os.close(fd)
fd = os.open('.', os.O_TMPFILE | os.O_EXCL | os.O_RDWR, 0o600)
print('excl flink errno', flink(fd, 'excl'))
os.close(fd)
fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o600)
os.write(fd, b'x' * 100000)
os.close(fd)
try:
    os.open('.', os.O_TMPFILE | os.O_RDONLY)
except OSError as e:
    print('read-only', e.errno)
print(sorted(os.listdir('.')), open('named').read())
"
"#;
    let ours = sh_in(&s.mnt, script);
    let theirs = sh_in(&tmpfs, script);
    let _ = Command::new("umount").arg(&tmpfs).status();
    assert_eq!(ours, theirs, "noseFS:\n{ours}\ntmpfs:\n{theirs}");
    assert!(ours.contains("flink 0 nlink 1"), "{ours}");
    umount(&s.mnt);
    let out = fsck(&s.image);
    assert!(out.status.success(), "{out:?}");
    assert!(mount(&s).status.success());
    let named = std::fs::read(s.mnt.join("named")).unwrap();
    assert_eq!(named, b"hello tmpfile");
    umount(&s.mnt);
}

/// A mount made right after an unmount of the same mount point stays: the daemon that lost the
/// old mount must not unmount the mount point again on its way out (it did, by path, half the
/// time: fuser read the device's POLLERR as "still mounted"; vendor/fuser/NOSEFS-PATCH.md).
#[test]
fn the_same_image_mounts_and_checks_right_after_an_unmount() {
    if !fuse_usable() {
        eprintln!("skipped: needs /dev/fuse and root");
        return;
    }
    let s = setup();
    for round in 0..5 {
        let out = nosefs()
            .arg("mount")
            .arg(&s.image)
            .arg(&s.mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Enough dirty files that the daemon's commit at unmount takes a moment.
        for i in 0..200 {
            std::fs::write(s.mnt.join(format!("f{round}-{i}")), [round as u8; 5000]).unwrap();
        }
        umount(&s.mnt);
        let out = nosefs().arg("fsck").arg(&s.image).output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: fsck right after the unmount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_mount_right_after_an_unmount_of_the_same_mount_point_stays() {
    if !fuse_usable() {
        eprintln!("skipped: needs /dev/fuse and root");
        return;
    }
    let s = setup();
    for round in 0..12 {
        // A new image each round: the last one's daemon may still be letting its image go.
        let image = s.image.with_extension(format!("{round}.img"));
        let out = nosefs()
            .args(["mkfs", "--size", "64M"])
            .arg(&image)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let out = nosefs()
            .arg("mount")
            .arg(&image)
            .arg(&s.mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The old daemon's exit comes a moment after the unmount: still mounted after it.
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(s.mnt.join("f"), b"x").unwrap_or_else(|e| panic!("round {round}: {e}"));
        umount(&s.mnt);
    }
}
