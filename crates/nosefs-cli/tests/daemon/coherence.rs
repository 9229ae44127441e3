//! One file system through the shim and through the FUSE mount, and who may do what: the
//! two paths seeing each other's changes (names, attributes, sizes), another user's
//! permissions, changed credentials, a read-only mount.

use super::*;

#[test]
fn the_shim_and_the_fuse_mount_see_one_file_system() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // The kernel caches what it looked up: a name, an attribute, the data.
    std::fs::write(m.mnt.join("k"), b"kernel 1\n").unwrap();
    assert_eq!(std::fs::read(m.mnt.join("k")).unwrap(), b"kernel 1\n");
    assert!(!m.mnt.join("new").exists()); // a negative entry, cached
    assert!(m.mnt.join("gone").metadata().is_err());
    let out = m.run(
        r#"set -e; cd "$D" || exit 9; echo shim >> k; echo made > new; mv new renamed; mkdir dir; touch -d 2001-01-01T00:00:00Z k; echo gone > gone; rm gone"#,
    );
    assert!(out.status.success(), "{}", text(&out));
    // At once, through the kernel: names, sizes, contents, times.
    assert_eq!(std::fs::read(m.mnt.join("k")).unwrap(), b"kernel 1\nshim\n");
    assert!(!m.mnt.join("new").exists());
    assert_eq!(std::fs::read(m.mnt.join("renamed")).unwrap(), b"made\n");
    assert!(m.mnt.join("dir").is_dir());
    assert!(!m.mnt.join("gone").exists());
    let mtime = std::fs::metadata(m.mnt.join("k")).unwrap().mtime();
    assert_eq!(mtime, 978307200, "2001-01-01 through the kernel");
    // And the other way: the kernel's changes, at once under the shim.
    std::fs::write(m.mnt.join("renamed"), b"kernel 2\n").unwrap();
    std::fs::remove_dir(m.mnt.join("dir")).unwrap();
    let out =
        m.run(r#"cd "$D" || exit 9; cat renamed; test -e dir && echo dir still there; stat -c %s renamed"#);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "kernel 2\n9\n",
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}

/// The daemon invalidates the kernel's attributes of an inode only while the kernel may hold
/// them valid (it gave them in a reply since the last invalidation): every stat through the
/// mount between shim changes must still see each change, through every reply that hands the
/// kernel attributes (lookup, getattr, readdirplus, setattr, create).
#[test]
fn attributes_through_the_mount_follow_every_change_by_shim_clients() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    std::fs::create_dir(m.mnt.join("d")).unwrap();
    std::fs::write(m.mnt.join("d/f"), b"").unwrap();
    let dir_nlink = || std::fs::metadata(m.mnt.join("d")).unwrap().nlink();
    let file = || std::fs::metadata(m.mnt.join("d/f")).unwrap();
    for round in 0..4u64 {
        // Kernel views before each change: a getattr, and a listing with attributes.
        let before = (dir_nlink(), file().len(), file().mode());
        let _ = std::fs::read_dir(m.mnt.join("d")).unwrap().count();
        let script = format!(
            r#"set -e; cd "$D/d"; mkdir sub{round}; printf 'xx' >> f; chmod {mode:o} f; touch -d @{t} f"#,
            mode = 0o600 + round,
            t = 1_000_000_000 + round * 1000,
        );
        let out = m.run(&script);
        assert!(out.status.success(), "{}", text(&out));
        let after = (dir_nlink(), file().len(), file().mode() & 0o777);
        assert_eq!(
            after,
            (before.0 + 1, before.1 + 2, 0o600 + round as u32),
            "round {round}: what the kernel shows after the shim's changes"
        );
        assert_eq!(file().mtime(), 1_000_000_000 + round as i64 * 1000);
        // A second change with no kernel look in between, then one look.
        let out = m.run(&format!(
            r#"set -e; cd "$D/d"; mkdir again{round}; printf 'y' >> f"#
        ));
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!((dir_nlink(), file().len()), (after.0 + 1, after.1 + 1));
    }
    m.unmount_and_fsck();
}

#[test]
fn another_user_gets_the_permissions_the_fuse_mount_gives() {
    if !usable() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let reset = r#"set -e; cd "$D" || exit 9; rm -rf private open; mkdir private open; chmod 700 private; echo s > private/f; echo p > open/mine; chmod 600 open/mine; echo r > open/theirs; chmod 644 open/theirs; chmod 777 open; chmod 755 ."#;
    let probe = r#"cd "$D" || exit 9; for c in "cat private/f" "cat open/mine" "cat open/theirs" "ls private" "touch private/x" "echo y > open/theirs" "touch open/new" "chmod 777 open/theirs" "rm open/theirs"; do if eval "$c" >/dev/null 2>&1; then echo "$c: ok"; else echo "$c: denied"; fi; done"#;
    let as_nobody = |shim: bool| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        if shim {
            c.args([nosefs(), "run", "--at"]).arg(&m.mnt).arg("--");
        }
        c.args(["bash", "-c", probe])
            .env("D", &m.mnt)
            .env("LC_ALL", "C")
            .env_remove("NOSEFS_IMAGE");
        c.output().unwrap()
    };
    let out = m.run(reset);
    assert!(out.status.success(), "{}", text(&out));
    let through_fuse = as_nobody(false);
    let out = m.run(reset);
    assert!(out.status.success(), "{}", text(&out));
    let through_shim = as_nobody(true);
    assert_eq!(
        String::from_utf8_lossy(&through_shim.stdout),
        String::from_utf8_lossy(&through_fuse.stdout),
        "\nshim: {}\nfuse: {}",
        text(&through_shim),
        text(&through_fuse)
    );
    let fuse = String::from_utf8_lossy(&through_fuse.stdout);
    assert!(
        fuse.contains("cat private/f: denied") && fuse.contains("cat open/theirs: ok"),
        "{fuse}"
    );
    m.unmount_and_fsck();
}

#[test]
fn a_client_that_changes_credentials_is_checked_with_the_new_ones() {
    if !usable() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    // As pjdfstest and daemons that drop privileges do: seteuid inside one process. Before the
    // daemon learned of such changes, the process kept root's rights there (31 pjdfstest cases).
    let script = r#"python3 - <<'PY'
import os
d = os.environ["D"]
os.makedirs(os.path.join(d, "open"), exist_ok=True)
os.chmod(os.path.join(d, "open"), 0o777)
with open(os.path.join(d, "rootfile"), "w") as f:
    f.write("root's\n")
os.chmod(os.path.join(d, "rootfile"), 0o644)
os.setgroups([])
os.setegid(65534)
os.seteuid(65534)
try:
    open(os.path.join(d, "rootfile"), "a").write("nobody's\n")
    print("write as nobody: ok")
except PermissionError:
    print("write as nobody: denied")
new = os.path.join(d, "open", "made-by-nobody")
open(new, "w").close()
st = os.stat(new)
print("owner", st.st_uid, st.st_gid)
os.seteuid(0)
os.setegid(0)
open(os.path.join(d, "rootfile"), "a").write("root again\n")
print(open(os.path.join(d, "rootfile")).read().strip().replace("\n", " | "))
PY
"#;
    let out = same_as_kernel(&m, script);
    assert!(
        out.contains("write as nobody: denied\nowner 65534 65534\nroot's | root again"),
        "{out}"
    );
    m.unmount_and_fsck();
}

#[test]
fn a_read_only_mount_serves_clients_reads_and_refuses_their_changes() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    std::fs::write(m.mnt.join("f"), "kept\n").unwrap();
    m.unmount_and_fsck();
    let before = std::fs::read(&m.image).unwrap();
    let out = Command::new(nosefs())
        .args(["mount", "-o", "ro"])
        .arg(&m.image)
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -o ro: {}", text(&out));
    let script = r#"cd "$D"
cat f
for c in "echo x > g" "echo y >> f" "mkdir d" "rm f" "mv f h" "chmod 600 f" "setfattr -n user.a -v 1 f"; do
    if eval "$c" 2>/dev/null; then echo "$c: done"; else echo "$c: refused"; fi
done
python3 -c "
import os, errno
try:
    os.open('g', os.O_CREAT | os.O_WRONLY)
except OSError as e:
    print(errno.errorcode[e.errno])
"
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.starts_with("kept\n") && printed.ends_with("EROFS\n"),
        "{printed}"
    );
    assert!(!printed.contains("done"), "{printed}");
    m.unmount_and_fsck();
    assert!(
        std::fs::read(&m.image).unwrap() == before,
        "a read-only mount never writes the image"
    );
}

/// lseek(SEEK_END) answers from the word of shared memory the daemon keeps at the file's size
/// (issue 39: PostgreSQL's relation-size probes), and that word follows every change: appends
/// and truncates by other daemon clients, writes through the FUSE mount by a program outside
/// the shim, fallocate, and this process's own writes; a forked child asks its own connection.
#[test]
fn seek_end_follows_every_change_of_size() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"set -e
: > "$D/f"
/usr/bin/python3 - "$D/f" <<'PY'
import os, subprocess, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
end = lambda: os.lseek(fd, 0, os.SEEK_END)
out = [end()]
subprocess.run(['sh', '-c', 'printf %0100d 0 >> "$1"', 'sh', path], check=True)
out.append(end())
# Through the FUSE mount, by a program the shim does not serve.
env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}
subprocess.run(['sh', '-c', 'printf %0100d 0 >> "$1"', 'sh', path], check=True, env=env)
out.append(end())
subprocess.run(['truncate', '-s', '50', path], check=True)
out.append(end())
os.pwrite(fd, b'x' * 10, 1000)
out.append(end())
os.posix_fallocate(fd, 0, 4096)
out.append(end())
pid = os.fork()
if pid == 0:
    os.ftruncate(fd, 7)
    os._exit(0 if end() == 7 else 1)
_, status = os.waitpid(pid, 0)
out.append(end())
out.append(status)
print(' '.join(map(str, out)))
PY
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0 100 200 50 1010 4096 7 0",
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}

/// A client whose user owns the image (root here) reads file data from its own view of the
/// image after its first read of a file (`nosefs_core::file::direct`); every change by another
/// client, by a program on the FUSE mount, a truncate and a mapping's stores are seen by its
/// next read. A client of another user asks the daemon for every read.
#[test]
fn reads_a_client_makes_itself_see_every_change_by_others() {
    if !usable() {
        return;
    }
    let stats = tempfile::NamedTempFile::new_in("/dev/shm").unwrap();
    let stats_option = format!("stats={}", stats.path().display());
    let m = mount_with(&["allow_other", &stats_option]);
    let reader = r#"
import mmap, os, subprocess, sys
d = os.environ["D"]
path = d + "/f"
with open(path, "wb") as f:
    f.write(b"a" * 100_000)
os.chmod(path, 0o666)
fd = os.open(path, os.O_RDONLY)
def expect(offset, data, what):
    got = os.pread(fd, len(data), offset)
    if got != data:
        sys.exit(f"{what}: read {got[:20]!r}..., wanted {data[:20]!r}...")
expect(0, b"a" * 100_000, "first read")
for k in range(200):
    assert os.pread(fd, 4096, k * 400) == b"a" * 4096
# Another client (a child process: a connection of its own) overwrites in place.
subprocess.run(["sh", "-c", f"printf bbbb | dd of={path} bs=1 seek=5000 conv=notrunc 2>/dev/null"], check=True)
expect(4998, b"aabbbbaa", "after another client's write")
# A program outside the shim, through the FUSE mount.
subprocess.run(["env", "-u", "LD_PRELOAD", "python3", "-c",
    f"import os; fd = os.open({path!r}, os.O_WRONLY); os.pwrite(fd, b'cc', 70_000)"], check=True)
expect(69_999, b"acca", "after a write through the FUSE mount")
# Truncated by another client, then grown with a hole.
subprocess.run(["truncate", "-s", "60000", path], check=True)
expect(59_998, b"aa", "after a truncate")
assert os.pread(fd, 10, 60_000) == b"", "read past the new end"
subprocess.run(["truncate", "-s", "70000", path], check=True)
expect(59_999, b"a\0\0", "after growing")
# Stores into a shared mapping of this process, seen by its reads before any msync.
wfd = os.open(path, os.O_RDWR)
m = mmap.mmap(wfd, 8192)
m[100:104] = b"dddd"
expect(99, b"adddda", "after stores into a mapping")
m.close()
print("ok")
"#;
    let out = m.run(&format!("python3 -c '{}'", reader.replace('\'', "'\\''")));
    assert!(
        out.status.success() && text(&out).contains("ok"),
        "{}",
        text(&out)
    );
    // Another user: every read asks the daemon, and answers the same.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([nosefs(), "run", "--at"])
        .arg(&m.mnt)
        .args(["--", "python3", "-c"])
        .arg("import os; fd = os.open(os.environ['D'] + '/f', os.O_RDONLY); assert all(os.pread(fd, 4096, 10_000 + k * 7) == b'a' * 4096 for k in range(300)); print('ok')")
        .env("D", &m.mnt)
        .env_remove("NOSEFS_IMAGE")
        .output()
        .unwrap();
    assert!(text(&out).contains("ok"), "{}", text(&out));
    m.unmount_and_fsck();
    let table = std::fs::read_to_string(stats.path()).unwrap();
    let count = |kind: &str| -> u64 {
        table
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{kind}\t")))
            .and_then(|rest| rest.split('\t').next()?.parse().ok())
            .unwrap_or(0)
    };
    // The root client's ~210 reads took a handful of requests (one per change it saw); the
    // other user's 300 took one each.
    let (mapped, plain) = (count("read_mapped"), count("read"));
    assert!(plain >= 300, "{table}");
    assert!(mapped < 40, "{table}");
}

/// Direct reads racing writes that free and reuse blocks: one client rewrites pages of file A
/// (each rewrite frees the page's old block), another rewrites file B (which takes the freed
/// blocks), while a third reads pages of A from its view of the image. Every page it reads
/// must be one A held at some time: A's bytes are below 0x80 and B's above, and each page of A
/// is written whole with one byte value that names its page, so a read that took a block after
/// B reused it, or mixed two of A's pages, is caught; once the writers end, every page must read
/// as last written.
#[test]
fn direct_reads_racing_rewrites_never_see_another_file_s_bytes() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"
import os, subprocess, sys, time
d = os.environ["D"]
PAGES = 256
def page_byte(k, v):
    return (k * 8 + v % 8) % 128   # page k's bytes at version v: below 0x80, naming k
with open(d + "/a", "wb") as f:
    for k in range(PAGES):
        f.write(bytes([page_byte(k, 0)]) * 4096)
with open(d + "/b", "wb") as f:
    f.write(b"\xff" * (PAGES * 4096))
writer_a = f"""
import os, random
fd = os.open({d!r} + '/a', os.O_WRONLY)
r = random.Random(1)
last = [(k * 8) % 128 for k in range({PAGES})]
for n in range(1, 60000):
    k = r.randrange({PAGES})
    last[k] = (k * 8 + n % 8) % 128
    os.pwrite(fd, bytes([last[k]]) * 4096, k * 4096)
    if n % 64 == 0:
        os.fsync(fd)
print(repr(last))
"""
writer_b = f"""
import os, random
fd = os.open({d!r} + '/b', os.O_WRONLY)
r = random.Random(2)
for n in range(1, 60000):
    k = r.randrange({PAGES})
    os.pwrite(fd, bytes([0x80 + n % 128]) * 4096, k * 4096)
    if n % 64 == 0:
        os.fsync(fd)
"""
writers = [
    subprocess.Popen([sys.executable, "-c", w], stdout=subprocess.PIPE)
    for w in (writer_a, writer_b)
]
fd = os.open(d + "/a", os.O_RDONLY)
reads = 0
import random
r = random.Random(3)
while any(w.poll() is None for w in writers):
    k = r.randrange(PAGES)
    page = os.pread(fd, 4096, k * 4096)
    reads += 1
    if len(page) != 4096 or max(page) >= 0x80:
        sys.exit(f"page {k}: another file's bytes after {reads} reads: {sorted(set(page))[:8]}")
    wanted = {page_byte(k, v) for v in range(8)}
    if not set(page) <= wanted:
        sys.exit(f"page {k}: bytes of another page after {reads} reads: {sorted(set(page))[:8]}")
last = eval(writers[0].communicate()[0])
for w in writers:
    assert w.wait() == 0
# Once the writers are done, every page reads as last written.
for k in range(PAGES):
    page = os.pread(fd, 4096, k * 4096)
    if page != bytes([last[k]]) * 4096:
        sys.exit(f"page {k}: {sorted(set(page))[:8]} where {last[k]} was written last")
print("ok", reads)
"#;
    let out = m.run(&format!("python3 -c '{}'", script.replace('\'', "'\\''")));
    assert!(
        out.status.success() && text(&out).contains("ok"),
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}
