//! Daemon mode end to end: `nosefs mount` serves programs under `nosefs run --at MOUNTPOINT`
//! (many processes, one image) beside the kernel's FUSE requests. Shell work, make and git
//! compared with a kernel directory; concurrent appenders; the two paths seeing one file
//! system; another user's permissions; a killed client; a killed daemon. Needs /dev/fuse and
//! root (as CI has); otherwise each test says why it did not run.

mod common;

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
    _dir: tempfile::TempDir,
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
        _dir: dir,
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

#[test]
fn shell_make_and_git_work_on_one_image_from_many_processes() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r##"set -e
cd "$D"
echo one > f; echo two >> f; ls nothere 2>&1 | sed 's/^ls: //' > err || true
( echo a; echo b; echo c ) > shared   # one description, its offset shared across forks
{ echo x; cat f; } | tr a-z A-Z > piped
cat <<EOF > here
heredoc $((1 + 2))
EOF
for i in 1 2 3; do echo "job $i" > "bg$i" & done; wait
cat f err shared piped here bg1 bg2 bg3
mkdir -p src && cd src
printf '#include <stdio.h>\nint add(int, int);\nint main(void) { printf("%%d\\n", add(2, 3)); return 0; }\n' > main.c
printf 'int add(int a, int b) { return a + b; }\n' > add.c
printf 'prog: main.o add.o\n\tcc -o prog main.o add.o\n%%.o: %%.c\n\tcc -c $<\n' > Makefile
make -s -j2 && ./prog
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
git init -q -b main . && git -c user.email=t@e -c user.name=t add main.c add.c Makefile
git -c user.email=t@e -c user.name=t commit -qm first
cd .. && git clone -q src clone && cd clone
echo '// more' >> add.c
git -c user.email=t@e -c user.name=t commit -qam second
git status --short | cat
git gc -q && git fsck --no-progress 2>&1 | cat
git log --format='%H %s' | cat
"##;
    let out = same_as_kernel(&m, script);
    assert!(out.contains("A\nB\nC") || out.contains("a\nb\nc"), "{out}");
    assert!(out.contains("\n5\n") && out.contains(" second\n"), "{out}");
    // The FUSE path sees what the clients made.
    let built = std::fs::read(m.mnt.join("src/prog")).unwrap();
    assert!(built.starts_with(b"\x7fELF"));
    m.unmount_and_fsck();
}

#[test]
fn tar_sqlite3_and_python_behave_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"set -e
cd "$D"
mkdir -p tree/a/b && echo one > tree/a/f && echo two > tree/a/b/g && ln -s a/f tree/link
tar -cf t.tar tree && mkdir out && tar -C out -xf t.tar && tar -tf t.tar | sort
diff -r tree out/tree && echo same
sqlite3 db 'create table t(k integer primary key, v text); begin; insert into t(v) values ("a"),("b"),("c"); commit; update t set v = "B" where k = 2;'
sqlite3 db 'select k, v from t order by k; pragma integrity_check;'
python3 - <<'PY'
import os, pathlib, shutil, tempfile
p = pathlib.Path("py"); p.mkdir()
(p / "x.txt").write_text("hello\n")
shutil.copytree(p, "py2")
os.rename("py2/x.txt", "py2/y.txt")
with tempfile.NamedTemporaryFile(dir=".", delete=False) as f:
    f.write(b"tmp"); name = f.name
print(sorted(os.listdir("py2")), open("py2/y.txt").read().strip(), os.path.getsize(name))
os.unlink(name)
PY
"#;
    let out = same_as_kernel(&m, script);
    assert!(
        out.contains("same\n") && out.contains("2|B\n") && out.contains("ok\n"),
        "{out}"
    );
    m.unmount_and_fsck();
}

#[test]
fn four_processes_append_to_one_log_with_no_lost_or_torn_record() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"set -e
for p in 1 2 3 4; do
  ( for i in $(seq 1 400); do printf 'process %s record %04d ..............................\n' $p $i; done >> "$D/log" ) &
done
wait
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let log = std::fs::read_to_string(m.mnt.join("log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1600, "{}", &log[..log.len().min(2000)]);
    for p in 1..=4 {
        let mine: Vec<u32> = lines
            .iter()
            .filter(|l| l.starts_with(&format!("process {p} ")))
            .map(|l| {
                assert!(l.ends_with("..."), "torn: {l:?}");
                l[17..21].parse().unwrap()
            })
            .collect();
        assert_eq!(mine, (1..=400).collect::<Vec<_>>(), "process {p}");
    }
    m.unmount_and_fsck();
}

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
fn two_sqlite3_processes_share_one_database_under_its_locks() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // Rollback journaling: each writer takes the database's POSIX locks; without them being
    // honoured between processes, transactions failed with "disk I/O error".
    let script = r#"cd "$D" || exit 9
sqlite3 db "PRAGMA journal_mode=DELETE; CREATE TABLE t(w INTEGER, i INTEGER);" >/dev/null
w() { for i in $(seq 100); do sqlite3 -cmd ".timeout 20000" db "BEGIN IMMEDIATE; INSERT INTO t VALUES($1, $i); INSERT INTO t SELECT $1, -i FROM t WHERE w=$1 AND i=$i; COMMIT;" || echo "failed $1 $i"; done; }
w 1 & w 2 & wait
sqlite3 db "PRAGMA integrity_check; SELECT w, count(*) FROM t GROUP BY w;"
"#;
    let out = same_as_kernel(&m, script);
    assert_eq!(out, "ok\n1|200\n2|200\n");
    m.unmount_and_fsck();
}

#[test]
fn shared_mappings_serve_sqlite_wal_between_processes_and_reach_the_fuse_mount() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // WAL maps the -shm index shared and writable; two writer processes share it (through the
    // daemon's FUSE mount, one page cache), then python holds two connections in one process.
    let script = r#"cd "$D" || exit 9
sqlite3 db "PRAGMA journal_mode=WAL; CREATE TABLE t(w INTEGER, i INTEGER);"
w() { for i in $(seq 100); do sqlite3 -cmd ".timeout 20000" db "BEGIN IMMEDIATE; INSERT INTO t VALUES($1, $i); COMMIT;" || echo "failed $1 $i"; done; }
w 1 & w 2 & wait
python3 - <<'PY'
import mmap, os, sqlite3
a = sqlite3.connect("db", isolation_level=None)
b = sqlite3.connect("db", isolation_level=None)
for i in range(50):
    a.execute("INSERT INTO t VALUES (3, ?)", (i,))
    assert b.execute("SELECT count(*) FROM t WHERE w = 3 AND i = ?", (i,)).fetchone()[0] == 1
a.execute("PRAGMA wal_checkpoint(TRUNCATE)")
a.close(); b.close()
fd = os.open("mapped", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.ftruncate(fd, 8192)
view = mmap.mmap(fd, 8192)
view[4096:4101] = b"store"
print(os.pread(fd, 5, 4096).decode())   # a read sees the store before any msync
os.pwrite(fd, b"WRITE", 4098)
print(view[4096:4103].decode())          # the mapping sees the write
view.flush()
view.close(); os.close(fd)
PY
sqlite3 db "PRAGMA integrity_check; SELECT w, count(*) FROM t GROUP BY w;"
"#;
    let out = same_as_kernel(&m, script);
    assert_eq!(out, "wal\nstore\nstWRITE\nok\n1|100\n2|100\n3|50\n");
    // The FUSE path (no shim) sees the mapped stores and the write.
    let mapped = std::fs::read(m.mnt.join("mapped")).unwrap();
    assert_eq!(&mapped[4096..4103], b"stWRITE");
    m.unmount_and_fsck();
}

/// Shared mappings of one file by several client processes are one memory, as on the kernel:
/// a store by one is seen by the others' mappings and by every read at once (before any
/// msync); a client killed with stores it never synced loses none of them; after msync and
/// exit everything is on the FUSE mount and in the image (the daemon lends the file's shadow to
/// each client, which reports the pages it stored: `nosefs_core::file::lent`).
#[test]
fn shared_mappings_of_clients_are_one_memory_and_lose_nothing() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import mmap, os, subprocess, sys
fd = os.open("shared", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.ftruncate(fd, 4 * 4096)
m = mmap.mmap(fd, 4 * 4096)
m[0:5] = b"first"
child = """
import mmap, os, sys, time
f = os.open("shared", os.O_RDWR)
m = mmap.mmap(f, 4 * 4096)
print(m[0:5].decode(), flush=True)
m[int(sys.argv[1]):int(sys.argv[1]) + 5] = sys.argv[2].encode()
if sys.argv[3] == "sync":
    m.flush()
else:
    print("stored", flush=True)
    time.sleep(60)
"""
r = subprocess.run([sys.executable, "-c", child, "4096", "child", "sync"], capture_output=True, text=True)
print(r.stdout.strip(), m[4096:4101].decode())
p = subprocess.Popen([sys.executable, "-c", child, "8192", "kill9", "wait"], stdout=subprocess.PIPE, text=True)
print(p.stdout.readline().strip(), p.stdout.readline().strip())
p.kill(); p.wait()
print(os.pread(fd, 5, 8192).decode())   # (not through m: its scan would report the page)
os.pwrite(fd, b"write", 12288)
print(m[12288:12293].decode())
m.flush()
m.close(); os.close(fd)
PY
"#;
    let out = same_as_kernel(&m, script);
    assert_eq!(out, "first child\nfirst stored\nkill9\nwrite\n");
    let on_fuse = std::fs::read(m.mnt.join("shared")).unwrap();
    for (at, bytes) in [
        (0, b"first"),
        (4096, b"child"),
        (8192, b"kill9"),
        (12288, b"write"),
    ] {
        assert_eq!(
            &on_fuse[at..at + 5],
            bytes,
            "at {at} through the FUSE mount"
        );
    }
    m.unmount_and_fsck();
    // In the image: read back in embedded mode.
    let at = m.image.with_extension("at");
    let out = Command::new(nosefs())
        .arg("run")
        .arg("--image")
        .arg(&m.image)
        .arg("--at")
        .arg(&at)
        .args(["od", "-An", "-c", "-w4096"])
        .arg(at.join("shared"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let dump = String::from_utf8_lossy(&out.stdout).replace(' ', "");
    for word in ["first", "child", "kill9", "write"] {
        assert!(dump.contains(word), "{word} not in the image: {dump}");
    }
}

/// A read-only shared mapping keeps seeing the file as clients write it (its own writes and
/// another process's), with the rest of its pages intact; a mapping made writable later with
/// mprotect has its stores written back before the process's own read, as on the kernel.
#[test]
fn read_only_and_mprotected_mappings_follow_writes_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import ctypes, mmap, os, subprocess, sys
fd = os.open("f", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.write(fd, b"a" * 65536)
view = mmap.mmap(fd, 65536, mmap.MAP_SHARED, mmap.PROT_READ)
print(view[0:4].decode(), view[40000:40004].decode())
os.pwrite(fd, b"mine", 8192)
subprocess.run([sys.executable, "-c",
    "import os; f = os.open('f', os.O_RDWR); os.pwrite(f, b'them', 12288); os.close(f)"], check=True)
print(view[8192:8196].decode(), view[12288:12292].decode(), view[40000:40004].decode())
view.close()
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
addr = libc.mmap(None, 8192, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
assert libc.mprotect(ctypes.c_void_p(addr), 8192, mmap.PROT_READ | mmap.PROT_WRITE) == 0
ctypes.memmove(addr + 100, b"prot", 4)
print(os.pread(fd, 4, 100).decode())
os.close(fd)
PY
"#;
    let out = same_as_kernel(&m, script);
    assert_eq!(out, "aaaa aaaa\nmine them aaaa\nprot\n");
    m.unmount_and_fsck();
}

#[test]
fn lmdb_with_write_mapped_commits_as_a_client() {
    if !usable() || !common::has_python_lmdb() {
        eprintln!("skipped: needs /dev/fuse and /usr/bin/python3 with lmdb");
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::LMDB_SCRIPT);
    assert!(out.contains("entries 8000 8000"), "{out}");
    m.unmount_and_fsck();
}

#[test]
fn locks_are_honoured_between_clients_and_the_fuse_mount() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // A client holds a lock; another client, and a program on the FUSE mount (no shim), see it.
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import fcntl, os, subprocess, sys
probe = """
import fcntl, struct
f = open("lockme", "r+")
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 5)
    print("%s: granted")
except OSError:
    print("%s: refused")
got = fcntl.fcntl(f, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
print("%s: F_GETLK type", struct.unpack("hhqqi", got)[0] == fcntl.F_WRLCK)
f.close()
"""
with open("lockme", "w") as f:
    f.write("x" * 100)
f = open("lockme", "r+")
f.seek(5)
fcntl.lockf(f, fcntl.LOCK_EX, 10, 0, os.SEEK_CUR)
env = dict(os.environ)
def run(who, env=None):
    r = subprocess.run([sys.executable, "-c", probe.replace("%s", who)], capture_output=True, text=True, env=env)
    print(r.stdout.strip() or r.stderr)
run("client", env)
env.pop("LD_PRELOAD", None)
run("kernel", env)
fcntl.lockf(f, fcntl.LOCK_UN, 10, 0, os.SEEK_CUR)
run("after unlock")
PY
"#;
    let out = m.run(script);
    let text_out = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        text_out,
        "client: refused\nclient: F_GETLK type True\nkernel: refused\nkernel: F_GETLK type True\n\
         after unlock: granted\nafter unlock: F_GETLK type False\n"
    );
    m.unmount_and_fsck();
}

#[test]
fn record_locks_belong_to_the_process_and_go_with_any_close_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // POSIX record locks are the process's, per file: a second description of the file (as
    // SQLite's second connection opens) locks and queries beside the first without dropping its
    // locks, and closing any descriptor of the file drops them all. Another process probes.
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import fcntl, os, struct, subprocess, sys
probe = """
import fcntl, sys
f = open("db", "r+")
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    print(sys.argv[1], "granted")
except OSError:
    print(sys.argv[1], "refused")
"""
def other(when):
    r = subprocess.run([sys.executable, "-c", probe, when], capture_output=True, text=True)
    print(r.stdout.strip() or r.stderr.strip())
with open("db", "w") as f:
    f.write("x" * 100)
a = open("db", "r+")
fcntl.lockf(a, fcntl.LOCK_EX, 1, 0)
other("held:")
b = open("db", "r")
got = fcntl.fcntl(b, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
print("own locks never conflict:", struct.unpack("hhqqi", got)[0] == fcntl.F_UNLCK)
fcntl.lockf(b, fcntl.LOCK_SH, 1, 50)
try:
    fcntl.lockf(b, fcntl.LOCK_EX, 1, 60)
except OSError as e:
    print("write lock through a read-only description:", os.strerror(e.errno))
other("after a second description locked:")
b.close()
other("after the second closed:")
fcntl.lockf(a, fcntl.LOCK_EX, 1, 0)
other("locked again:")
os.close(os.dup(a.fileno()))
other("after a duplicate closed:")
fcntl.lockf(a, fcntl.LOCK_EX, 1, 0)
with open("db", "rb") as c:
    c.read()
other("after another description closed:")
PY
"#;
    let out = same_as_kernel(&m, script);
    assert_eq!(
        out,
        "held: refused\nown locks never conflict: True\n\
         write lock through a read-only description: Bad file descriptor\n\
         after a second description locked: refused\nafter the second closed: granted\n\
         locked again: refused\nafter a duplicate closed: granted\n\
         after another description closed: granted\n"
    );
    m.unmount_and_fsck();
}

#[test]
fn large_reads_and_writes_span_many_requests_and_agree_with_the_fuse_mount() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // Reads and writes larger than a request slot (256 KiB) go as several requests; reads at
    // odd offsets and past the end come back exact, and the FUSE mount sees the same bytes.
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import hashlib, os, random
r = random.Random(7)
data = bytes(r.getrandbits(8) for _ in range(1_500_007))
with open("big", "wb") as f:
    f.write(data[:1_000_000])
    f.write(data[1_000_000:])
fd = os.open("big", os.O_RDONLY)
whole = os.pread(fd, 2_000_000, 0)
print("whole", whole == data)
for off, n in [(1, 700_001), (262_100, 300_000), (1_499_000, 4096), (0, 1)]:
    print(off, n, os.pread(fd, n, off) == data[off:off + n])
print("past the end", os.pread(fd, 10, 1_600_000) == b"")
os.close(fd)
print(hashlib.sha256(data).hexdigest())
PY
"#;
    let out = m.run(script);
    let text_out = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<&str> = text_out.lines().collect();
    assert_eq!(
        &lines[..6],
        &[
            "whole True",
            "1 700001 True",
            "262100 300000 True",
            "1499000 4096 True",
            "0 1 True",
            "past the end True"
        ],
        "{text_out}"
    );
    let through_fuse = std::fs::read(m.mnt.join("big")).unwrap();
    let digest = Command::new("sha256sum")
        .arg(m.mnt.join("big"))
        .output()
        .unwrap();
    assert_eq!(through_fuse.len(), 1_500_007);
    assert!(
        String::from_utf8_lossy(&digest.stdout).starts_with(lines[6]),
        "{}",
        text(&digest)
    );
    m.unmount_and_fsck();
}

#[test]
fn programs_stored_on_nosefs_run_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::EXEC_SCRIPT);
    assert!(
        out.contains(
            "nested [./s3.sh]\nnot executable, exit 126\nsubprocess 7\n./p spawned, exit 7\n"
        ),
        "{out}"
    );
    assert!(
        out.ends_with(
            "./p close-on-exec by descriptor, exit 7\n./p inheritable by descriptor, exit 7\n\
             ./f.sh fexecve: No such file or directory\n./f.sh close-on-exec by descriptor, exit 99\n\
             by descriptor [fexecve]\n./f.sh inheritable by descriptor, exit 0\n\
             execveat in a directory, exit 7\nexecveat of a descriptor, exit 7\n\
             execveat of a program not executable, exit 2\n"
        ),
        "{out}"
    );
    m.unmount_and_fsck();
}

#[test]
fn python_multiprocessing_writes_files_from_a_pool() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // Forked workers (each its own connection, inheriting the parent's descriptors and cwd).
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import hashlib, multiprocessing, os
def work(i):
    path = os.path.join("out", "part-%03d" % i)
    with open(path, "wb") as f:
        f.write(hashlib.sha256(b"%d" % i).digest() * (i + 1))
        f.flush()
        os.fsync(f.fileno())
    return os.getpid()
os.makedirs("out", exist_ok=True)
with multiprocessing.Pool(4) as pool:
    pids = pool.map(work, range(64))
print(len(pids), len(os.listdir("out")))  # which workers ran them depends on the timing
print(hashlib.sha256(b"".join(open(os.path.join("out", n), "rb").read() for n in sorted(os.listdir("out")))).hexdigest())
PY
"#;
    let out = same_as_kernel(&m, script);
    assert!(out.starts_with("64 64\n"), "{out}");
    m.unmount_and_fsck();
}

#[test]
fn a_listing_that_renames_what_it_reads_ends() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::RENAME_WHILE_LISTING_SCRIPT);
    assert_eq!(out, "5000 5000 5000\n");
    m.unmount_and_fsck();
}

#[test]
fn extended_attributes_and_acls_behave_as_on_the_kernel_and_agree_with_the_fuse_mount() {
    if !usable() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    std::fs::set_permissions(&m.plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "{}\n{}\n{}",
        common::XATTR_SCRIPT,
        common::XATTR_RSYNC_SCRIPT,
        common::XATTR_OTHER_USER_SCRIPT
    );
    let out = same_as_kernel(&m, &script);
    assert!(out.contains("user:1234:rw-\t#effective:r--"), "{out}");
    assert!(
        out.ends_with("Permission denied\ndata\nnot readable\n"),
        "{out}"
    );
    // What the clients set, the kernel's path sees (and enforces), with no shim.
    let fuse = Command::new("sh")
        .args([
            "-c",
            "getfattr -n user.colour --only-values r/f; getfacl -n -c r/f",
        ])
        .current_dir(&m.mnt)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&fuse.stdout),
        "blueuser::rw-\nuser:65534:---\ngroup::r--\nmask::r--\nother::---\n\n",
        "{}",
        text(&fuse)
    );
    m.unmount_and_fsck();
}

#[test]
fn a_directory_removed_while_open_is_fstat_able_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::REMOVED_DIR_SCRIPT);
    assert_eq!(out, "0 0o40750\n[]\n0 0o40700\n[]\n['over']\n");
    m.unmount_and_fsck();
}

#[test]
fn a_directory_something_is_mounted_on_is_busy_until_the_unmount() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // The first rmdir reads the mount table; the mount after it and the unmount after that
    // must both be seen by the next rmdir (the daemon keeps the table between rmdirs).
    let out = same_as_kernel(
        &m,
        "mkdir $D/a $D/b && rmdir $D/a && echo removed a
         mount -t tmpfs none $D/b || exit 1
         rmdir $D/b 2>/dev/null || echo b busy
         umount $D/b && rmdir $D/b && echo removed b
         ls $D",
    );
    assert_eq!(out, "removed a\nb busy\nremoved b\n");
    m.unmount_and_fsck();
}

#[test]
fn unnamed_files_are_written_and_named_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::TMPFILE_SCRIPT);
    assert_eq!(out, "0 0o100640\n[]\n0 1 hidden\n-1 ENOENT\n['visible']\n");
    m.unmount_and_fsck();
}

#[test]
fn ranges_collapse_and_insert_without_moving_data() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = m.run(common::RANGES_SCRIPT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), common::RANGES_OUTPUT);
    // The kernel's path sees the moved bytes (the daemon invalidated its cache).
    let through_fuse = std::fs::read(m.mnt.join("f")).unwrap();
    assert_eq!(through_fuse.len(), 20480);
    assert!(through_fuse[..8192].iter().all(|&b| b == 0));
    assert_eq!(through_fuse[8192 + 300], (300 % 256) as u8);
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

#[test]
fn fiemap_maps_the_data_and_fionread_counts_what_is_left() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = m.run(common::FIEMAP_SCRIPT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), common::FIEMAP_OUTPUT);
    m.unmount_and_fsck();
}

#[test]
fn set_id_bits_long_relative_paths_bad_pointers_and_dropped_privileges_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let out = same_as_kernel(&m, common::KERNEL_ANSWERS_SCRIPT);
    assert!(out.contains("2666 write 666 fallocate 666"), "{out}");
    assert!(out.contains("chown refused\n"), "{out}");
    // The FUSE mount, which the kernel serves from this daemon, answers the same.
    let fuse_dir = m.mnt.join("fuse");
    std::fs::create_dir(&fuse_dir).unwrap();
    let fuse = Command::new("sh")
        .args(["-c", common::KERNEL_ANSWERS_SCRIPT])
        .env("D", &fuse_dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(fuse.status.success(), "{}", text(&fuse));
    assert_eq!(String::from_utf8_lossy(&fuse.stdout), out);
    m.unmount_and_fsck();
}

#[test]
fn programs_with_their_own_allocator_and_redis_run_as_clients() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = format!("PORT=16392\n{}", common::ALLOCATORS_SCRIPT);
    let out = same_as_kernel(&m, &script);
    if std::path::Path::new("/usr/bin/redis-server").exists() {
        assert!(out.contains("v\n2\na\nb\nc\n"), "{out}");
    }
    m.unmount_and_fsck();
}

/// PostgreSQL 15 with its default configuration (issue 38), a server of many processes, all
/// daemon clients, run as the postgres user: initdb, pgbench's tables, a restart, every row
/// there and amcheck's verdict on the primary key.
#[test]
fn postgresql_runs_with_its_default_configuration() {
    let bin = Path::new("/usr/lib/postgresql/15/bin");
    if !usable() || !bin.join("initdb").exists() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let script = r#"set -e
bin=/usr/lib/postgresql/15/bin
mkdir "$D/pg"; chown postgres:postgres "$D/pg"
sock="$(mktemp -d /tmp/nosefs-pg.XXXXXX)"; chown postgres "$sock"
trap 'pkill -9 -f -- "-D $D/pg/data" || true; rm -rf "$sock"' EXIT
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
cd /
as_pg timeout 120 $bin/initdb -D "$D/pg/data" >/dev/null
ctl() { as_pg timeout 120 $bin/pg_ctl -D "$D/pg/data" -o "-k $sock -p 54330 -c listen_addresses=" -l "$sock/log" -w "$@" >/dev/null; }
ctl start
as_pg timeout 120 $bin/pgbench -h "$sock" -p 54330 -i -s 1 -q postgres >/dev/null 2>&1
as_pg timeout 120 $bin/pgbench -h "$sock" -p 54330 -c 2 -t 200 -n postgres >/dev/null
ctl stop
ctl start
as_pg psql -h "$sock" -p 54330 -Atq postgres -c "select count(*) from pgbench_accounts" -c "create extension amcheck" -c "select bt_index_check('pgbench_accounts_pkey')" -c "select count(*) from pgbench_history"
ctl stop
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "100000\n\n400\n", "{}", text(&out));
    m.unmount_and_fsck();
}

/// RocksDB's db_bench (issue 38): 3,000 synced writes, then another process finds every key
/// (readrandom) and ldb scans exactly that many.
#[test]
fn rocksdb_keeps_every_synced_write() {
    if !usable() || !Path::new("/usr/bin/db_bench").exists() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"set -e
db_bench --benchmarks=fillseq --sync=1 --num=3000 --value_size=100 --db="$D/rocks" >/dev/null
db_bench --benchmarks=readrandom --use_existing_db=1 --num=3000 --reads=3000 --db="$D/rocks" | grep -o '([0-9]* of [0-9]* found)'
ldb --db="$D/rocks" scan | wc -l
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "(3000 of 3000 found)\n3000\n",
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
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

/// MariaDB with its default configuration (issue 38): InnoDB asks for io_uring, then libaio,
/// both of which the shim refuses as a kernel without them does, and falls back to its own
/// threads; the data is there after a restart and CHECK TABLE finds it sound.
#[test]
fn mariadb_runs_with_its_default_configuration() {
    if !usable() || !Path::new("/usr/sbin/mariadbd").exists() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let script = r#"set -e
mkdir "$D/data"; chown mysql:mysql "$D/data"
sock="$(mktemp -u /tmp/nosefs-maria.XXXXXX)"
# A server that hangs (install-db's bootstrap runs one as its child, which `timeout` does not
# reach) must not outlive the test.
trap 'pkill -9 -f -- "--datadir=$D/data" || true' EXIT
timeout 120 mariadb-install-db --user=mysql --datadir="$D/data" >/dev/null 2>&1
serve() {
  timeout 120 mariadbd --user=mysql --datadir="$D/data" --socket="$sock" --skip-networking \
    >/dev/null 2>&1 &
  for _ in $(seq 1 300); do mariadb -S "$sock" -uroot -e 'select 1' >/dev/null 2>&1 && return; sleep 0.1; done
  echo "mariadbd did not start"
}
serve
mariadb -S "$sock" -uroot -e "create database t; use t; create table x (id int primary key, v varchar(100)) engine=innodb; insert into x select seq, repeat('v', 90) from seq_1_to_5000;"
mariadb-admin -S "$sock" -uroot shutdown
wait
serve
mariadb -S "$sock" -uroot -N -e "select count(*) from t.x; check table t.x;"
mariadb-admin -S "$sock" -uroot shutdown
wait
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("5000\nt.x\tcheck\tstatus\tOK\n"),
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}

#[test]
fn holes_are_punched_found_and_copied_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::HOLES_SCRIPT);
    assert!(out.contains("f2 0 0 4096\n"), "{out}");
    m.unmount_and_fsck();
}

#[test]
fn spawned_children_get_the_descriptors_and_directory_handed_to_them() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::SPAWN_SCRIPT);
    assert_eq!(out, common::SPAWN_OUTPUT);
    m.unmount_and_fsck();
}

/// A child process killed if the test fails before it ends (no stray writers left behind).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_line(child: &mut Child, what: &str) {
    use std::io::BufRead;
    let stdout = child.stdout.as_mut().unwrap();
    let mut reader = std::io::BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains(what), "got {line:?}");
}

#[test]
fn a_killed_client_loses_nothing_fsynced_and_the_daemon_serves_on() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // Each round writes f<i % 50> whole and fsyncs it, then records i in `done` (fsynced).
    let writer = r#"cd "$D" || exit 9; exec python3 -c '
import os
print("started", flush=True)
i = 0
while True:
    fd = os.open(f"f{i % 50}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, (f"{i} " * 1000).encode())
    os.fsync(fd)
    os.close(fd)
    fd = os.open("done.tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, str(i).encode())
    os.fsync(fd)
    os.close(fd)
    os.rename("done.tmp", "done")
    i += 1
'"#;
    let mut child = Reaped(
        m.shim_command(writer)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_line(&mut child.0, "started");
    std::thread::sleep(Duration::from_millis(500));
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let done: usize = std::fs::read_to_string(m.mnt.join("done"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(done > 0);
    // Rounds up to `done` completed; round done+1 may have been cut anywhere in its write.
    for i in done.saturating_sub(48)..=done {
        let data = std::fs::read_to_string(m.mnt.join(format!("f{}", i % 50))).unwrap();
        let next = i + 50;
        let expected = format!("{i} ").repeat(1000);
        let newer = next == done + 1;
        assert!(
            data == expected || newer,
            "f{}: {}",
            i % 50,
            &data[..data.len().min(40)]
        );
    }
    let out = m.run(r#"cd "$D" || exit 9; echo after > after; cat after"#);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "after\n");
    m.unmount_and_fsck();
}

#[test]
fn a_killed_daemon_gives_its_clients_eio_and_the_next_mount_recovers() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = m.run(r#"cd "$D" || exit 9; echo kept > kept; sync"#);
    assert!(out.status.success(), "{}", text(&out));
    let client = r#"cd "$D" || exit 9; echo started; while echo x >> grow; do sleep 0.01; done; echo failed >&2; exit 3"#;
    let mut child = Reaped(
        m.shim_command(client)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_line(&mut child.0, "started");
    std::thread::sleep(Duration::from_millis(200));
    let pid = m.server_pid();
    let killed = Instant::now();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the client hangs after the daemon died"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let waited = killed.elapsed();
    assert_eq!(status.code(), Some(3), "the client's write failed");
    assert!(waited < Duration::from_secs(2), "it took {waited:?}");
    let _ = Command::new("umount").arg("-l").arg(&m.mnt).output();
    let out = Command::new(nosefs())
        .arg("mount")
        .arg(&m.image)
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "remount: {}", text(&out));
    assert_eq!(std::fs::read(m.mnt.join("kept")).unwrap(), b"kept\n");
    m.unmount_and_fsck();
}

#[test]
fn posix_spawn_file_actions_change_directory_and_open_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::SPAWN_CHDIR_SCRIPT);
    assert_eq!(
        out,
        "sub\nin sub\nexit 0\ninner\nin inner\nexit 0\ninner\nin inner\nexit 0\n\
         sub\nin sub\nexit 0\ntmp\nexit 1\n\
         spawn: No such file or directory\nspawn: Not a directory\n\
         exit 0\nwritten by the child\nspawn: No such file or directory\n"
    );
    m.unmount_and_fsck();
}

/// A FIFO on noseFS joins clients (and FUSE users): the kernel opens it through the daemon's
/// FUSE mount, with its blocking and ENXIO rules (the core serves no pipe).
#[test]
fn fifos_connect_clients_through_the_fuse_mount() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, FIFO_SCRIPT);
    assert_eq!(
        out,
        "p\nthrough the fifo\nno reader: ENXIO\nboth ends in one process\n3\n2\n1\n"
    );
    m.unmount_and_fsck();
}

const FIFO_SCRIPT: &str = r#"set -e
cd "$D"
mkfifo p && ls -l p | cut -c1
( echo "through the fifo" > p ) &
cat p
wait
python3 -c '
import os, errno
try:
    os.open("p", os.O_WRONLY | os.O_NONBLOCK)
except OSError as e:
    print("no reader:", errno.errorcode[e.errno])
r = os.open("p", os.O_RDONLY | os.O_NONBLOCK)
w = os.open("p", os.O_WRONLY)
os.write(w, b"both ends in one process\n")
print(os.read(r, 100).decode(), end="")
'
seq 1 3 > p & sort -r < p; wait
"#;

/// flock locks belong to the open file description, which a fork or exec shares: a lock
/// flock(1) takes through a shell's descriptor stays after flock exits (`exec 9>f; flock 9`),
/// and one a forked child takes holds off other descriptions until the last close.
#[test]
fn flock_through_a_shared_description_stays_with_it_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, SHARED_FLOCK_SCRIPT);
    assert_eq!(
        out,
        "locked through 9\nheld by the shell's description\nfree after close\n\
         a forked child locked the shared description\nfree after the last close\n"
    );
    m.unmount_and_fsck();
}

const SHARED_FLOCK_SCRIPT: &str = r#"cd "$D"
exec 9> lockfile
flock 9 && echo "locked through 9"
flock -n lockfile -c 'echo "got it (wrong)"' || echo "held by the shell's description"
exec 9>&-
flock -n lockfile -c 'echo "free after close"'
python3 -c '
import fcntl, os
fd = os.open("lockfile2", os.O_WRONLY | os.O_CREAT, 0o644)
pid = os.fork()
if pid == 0:
    fcntl.flock(fd, fcntl.LOCK_EX)
    os._exit(0)
os.waitpid(pid, 0)
other = os.open("lockfile2", os.O_WRONLY)
try:
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("got it (wrong)")
except BlockingIOError:
    print("a forked child locked the shared description")
os.close(fd)
fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("free after the last close")
'
"#;

/// A file renamed since it was opened is still locked and mapped shared through its
/// descriptor, not through whatever its old name names now: the shim finds it through the FUSE
/// mount by a path the daemon gives for its inode (`Fs::path_of`).
#[test]
fn files_renamed_since_they_were_opened_lock_and_map_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, RENAMED_SCRIPT);
    assert_eq!(
        out,
        "new locked\nold free\nmapped through the renamed file: b'hello'\n\
         the other file: another file now\nflock after a second rename: held\n"
    );
    m.unmount_and_fsck();
}

const RENAMED_SCRIPT: &str = r#"cd "$D"
python3 -c '
import fcntl, mmap, os, subprocess
probe = """
import fcntl, os, sys
f = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print(sys.argv[1], "free")
except OSError:
    print(sys.argv[1], "locked")
"""
fd = os.open("old", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 4096)
os.rename("old", "new")
with open("old", "w") as f:
    f.write("another file now\n")
fcntl.lockf(fd, fcntl.LOCK_EX)
for name in ["new", "old"]:
    subprocess.run(["python3", "-c", probe, name])
m = mmap.mmap(fd, 4096)
m[:5] = b"hello"
m.flush()
print("mapped through the renamed file:", open("new", "rb").read(5))
print("the other file:", open("old").read(), end="")
os.rename("new", "newer")
fcntl.flock(fd, fcntl.LOCK_EX)
print("flock after a second rename: held")
'
"#;

#[test]
fn shared_objects_stored_on_nosefs_load_with_dlopen() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::DLOPEN_SCRIPT);
    assert_eq!(
        out,
        "answer 42 loaded once: True\nmissing: True\nbare name: found\n\
         by the program runpath: found\n"
    );
    m.unmount_and_fsck();
}

#[test]
fn programs_are_found_through_path_directories_on_nosefs() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::PATH_SEARCH_SCRIPT);
    assert_eq!(
        out,
        "symlink to a kernel program runs\nfound on a PATH directory here\nposix_spawnp\n\
         e2 exit 0\nscript [posix_spawnp]\ns exit 0\nscript [execvp]\n\
         missing No such file or directory\nnoexec Permission denied\n"
    );
    m.unmount_and_fsck();
}

#[test]
fn splice_moves_data_between_nosefs_files_and_pipes() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::SPLICE_SCRIPT);
    assert!(
        out.ends_with(
            "pipe to file at an offset 2\nb'thrXYgh the pipe'\ntwo files: Bad file descriptor\n"
        ),
        "{out}"
    );
    m.unmount_and_fsck();
}

#[test]
fn mappings_resize_and_sparse_files_map_whole() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::MREMAP_SCRIPT);
    assert_eq!(
        out,
        "after resize 8192 b'first' b'second'\nshrunk 100 b'first'\nfile b'first' b''\n\
         4 GiB sparse, its tail: b'  DEARdear  '\n"
    );
    m.unmount_and_fsck();
}

#[test]
fn opens_that_create_never_fail_while_the_name_comes_and_goes() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::CREATE_RACE_SCRIPT);
    assert_eq!(
        out,
        "opens with O_CREAT that failed while the name came and went: 0\n"
    );
    m.unmount_and_fsck();
}

#[test]
fn unix_datagrams_reach_sockets_bound_on_nosefs_by_path() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::DATAGRAM_SCRIPT);
    assert_eq!(
        out,
        "received b'hello'\nreceived b'direct'\ngetsockname: named\ngetpeername: stream\n"
    );
    m.unmount_and_fsck();
}
