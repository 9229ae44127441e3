//! The preload shim end to end: unmodified programs under `nosefs run`, their outputs compared
//! with the same commands on a plain directory of the kernel's; the link check; exec adoption;
//! EBUSY for a second process; SIGKILL under write load.

mod common;

use common::text;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nosefs() -> &'static str {
    env!("CARGO_BIN_EXE_nosefs")
}

/// The shim, built beside the `nosefs` binary (`cargo build --workspace` builds both).
fn shim() -> PathBuf {
    let path = Path::new(nosefs()).with_file_name("libnosefs_preload.so");
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build -p nosefs-preload`",
        path.display()
    );
    path
}

struct Setup {
    /// Also every script's working directory: a script whose `cd "$D"` fails must not write
    /// into the checkout.
    scratch: tempfile::TempDir,
    image: PathBuf,
    at: PathBuf,
    plain: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("nosefs-preload")
        .tempdir_in("/dev/shm")
        .unwrap();
    let image = dir.path().join("image");
    let at = dir.path().join("nose");
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let out = Command::new(nosefs())
        .args(["mkfs", image.to_str().unwrap(), "--size", "128M"])
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs: {out:?}");
    Setup {
        scratch: dir,
        image,
        at,
        plain,
    }
}

impl Setup {
    /// `sh -c script` under the shim, with `$D` the noseFS directory.
    fn run(&self, script: &str) -> Output {
        shim();
        Command::new(nosefs())
            .args(["run", "--image"])
            .arg(&self.image)
            .arg("--at")
            .arg(&self.at)
            .args(["--", "sh", "-c", script])
            .current_dir(self.scratch.path())
            .env("D", &self.at)
            .env("LC_ALL", "C")
            .output()
            .unwrap()
    }

    /// The same script on a kernel directory, no shim.
    fn run_plain(&self, script: &str) -> Output {
        Command::new("sh")
            .args(["-c", script])
            .current_dir(self.scratch.path())
            .env("D", &self.plain)
            .env("LC_ALL", "C")
            .output()
            .unwrap()
    }

    fn fsck_clean(&self) {
        let out = Command::new(nosefs())
            .arg("fsck")
            .arg(&self.image)
            .output()
            .unwrap();
        assert!(out.status.success(), "fsck: {}", text(&out));
    }
}

/// Runs `script` both ways and asserts the same stdout and status, and no stderr under the shim.
fn same_as_kernel(setup: &Setup, script: &str) -> String {
    let plain = setup.run_plain(script);
    let ours = setup.run(script);
    common::assert_same_as_kernel(&ours, &setup.at, &plain, &setup.plain)
}

#[test]
fn link_check_no_hooked_name_is_imported_and_every_one_is_exported() {
    let nm = |args: &[&str]| {
        let out = Command::new("nm").args(args).arg(shim()).output().unwrap();
        assert!(out.status.success(), "nm: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let undefined = nm(&["-D", "--undefined-only"]);
    let imported: Vec<&str> = undefined
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap())
        .collect();
    for name in nosefs_preload_hooked() {
        assert!(
            !imported.contains(&name),
            "the shim imports {name}, which it exports: a call from inside would re-enter"
        );
    }
    let defined = nm(&["-D", "--defined-only"]);
    let exported: Vec<&str> = defined
        .lines()
        .filter(|l| l.contains(" T "))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    for name in nosefs_preload_hooked() {
        assert!(
            exported.contains(&name),
            "{name} is listed as hooked but not exported"
        );
    }
}

/// The hooked names, read from the shim's source (the list the crate documents).
fn nosefs_preload_hooked() -> Vec<&'static str> {
    let src = include_str!("../../nosefs-preload/src/lib.rs");
    let list = &src[src.find("pub const HOOKED").unwrap()..];
    let list = &list[..list.find("];").unwrap()];
    list.split('"').skip(1).step_by(2).collect()
}

#[test]
fn coreutils_and_the_shell_behave_as_on_the_kernel() {
    let setup = setup();
    let script = r#"
set -e
mkdir -p "$D/a/b/c"
echo hello > "$D/a/hello.txt"
printf 'line2\nline1\n' >> "$D/a/hello.txt"
cat "$D/a/hello.txt"
cp "$D/a/hello.txt" "$D/a/sorted"
cat "$D/a/sorted"
touch "$D/a/empty"
ln -s hello.txt "$D/a/link"
cat "$D/a/link"
readlink "$D/a/link"
ln "$D/a/hello.txt" "$D/a/hard"
stat -c '%n %s %h %F %a' "$D/a/hello.txt" "$D/a/hard" "$D/a/empty"
stat -c '%n %h %F %a' "$D/a/b"
cp -a "$D/a" "$D/copy"
mv "$D/copy/hello.txt" "$D/copy/moved.txt"
ls "$D" "$D/a" "$D/copy"
ls -l "$D/a" | awk 'NR > 1 {print $1, $2, ($1 ~ /^d/ ? "dir" : $5), $NF}'
cd "$D/a" && ls -1 && cat ./b/../hello.txt | wc -l
find "$D" -name '*.txt' | sort | sed "s|$D|D|"
du -s --apparent-size -B1 "$D/a/hello.txt" | cut -f1
echo data > "$D/a/b/c/deep"
{ echo one; echo two; } > "$D/a/grouped"; cat "$D/a/grouped"
cat "$D/a/grouped" | tr a-z A-Z
rm -r "$D/copy"
ls "$D"
df "$D" > /dev/null
test -d "$D/a/b" && test -f "$D/a/empty" && test ! -e "$D/nothing" && echo tests-ok
"#;
    same_as_kernel(&setup, script);
    setup.fsck_clean();
}

#[test]
fn tar_creates_and_extracts_a_real_tree() {
    let setup = setup();
    // A real tree: this crate's sources; archived from the kernel side, extracted into noseFS,
    // archived again from noseFS, and compared file by file. The file list is taken before
    // sha256sum starts: `find | xargs sha256sum` would have two processes on the image at once,
    // which embedded mode refuses (EBUSY) whenever find has not exited yet.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let script = format!(
        r#"set -e
mkdir "$D/x"
tar -C {src} -cf "$D/src.tar" .
tar -C "$D/x" -xf "$D/src.tar"
tar -C "$D/x" -cf "$D/again.tar" .
mkdir "$D/y" && tar -C "$D/y" -xf "$D/again.tar"
cd "$D/y"
files=$(find . -type f | sort)
sha256sum $files
"#,
        src = src.display()
    );
    let out = same_as_kernel(&setup, &script);
    assert!(out.lines().count() >= 5, "{out}");
    setup.fsck_clean();
}

#[test]
fn sqlite3_with_a_rollback_journal() {
    let setup = setup();
    let script = r#"set -e
sqlite3 "$D/db" "PRAGMA journal_mode=DELETE; CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);"
sqlite3 "$D/db" "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000) INSERT INTO t SELECT i, hex(randomblob(40)) FROM n; COMMIT;"
sqlite3 "$D/db" "UPDATE t SET v = 'x' WHERE k % 3 = 0; DELETE FROM t WHERE k % 7 = 0;"
sqlite3 "$D/db" "PRAGMA integrity_check; SELECT count(*), sum(k), sum(v = 'x') FROM t;"
"#;
    let out = same_as_kernel(&setup, script);
    assert!(out.contains("\nok\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn sqlite3_in_wal_mode_maps_its_shm_index() {
    let setup = setup();
    // WAL maps the -shm index shared and writable: through the core's mappings (atomic mmap).
    // Each sqlite3 is its own process, then python holds two connections in one process.
    let script = r#"set -e
sqlite3 "$D/db" "PRAGMA journal_mode=WAL; CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);"
sqlite3 "$D/db" "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000) INSERT INTO t SELECT i, printf('%040d', i) FROM n; COMMIT;"
sqlite3 "$D/db" "UPDATE t SET v = 'x' WHERE k % 3 = 0; DELETE FROM t WHERE k % 7 = 0;"
sqlite3 "$D/db" "PRAGMA journal_mode; PRAGMA integrity_check; SELECT count(*), sum(k), sum(v = 'x') FROM t;"
python3 - <<'PY'
import os, sqlite3
path = os.path.join(os.environ["D"], "db")
a = sqlite3.connect(path, isolation_level=None)
b = sqlite3.connect(path, isolation_level=None)
print(a.execute("PRAGMA journal_mode").fetchone()[0])
for i in range(50):
    a.execute("BEGIN")
    a.execute("INSERT INTO t(v) VALUES (?)", ("a%d" % i,))
    a.execute("COMMIT")
    # The other connection sees each commit through the shared -shm index.
    assert b.execute("SELECT count(*) FROM t WHERE v = ?", ("a%d" % i,)).fetchone()[0] == 1
b.execute("INSERT INTO t(v) VALUES ('from b')")
print(a.execute("SELECT count(*) FROM t").fetchone()[0])
print(a.execute("PRAGMA integrity_check").fetchone()[0])
a.execute("PRAGMA wal_checkpoint(TRUNCATE)")
a.close(); b.close()
PY
sqlite3 "$D/db" "SELECT count(*), sum(v = 'from b') FROM t; PRAGMA integrity_check;"
"#;
    let out = same_as_kernel(&setup, script);
    assert!(out.contains("wal\nwal\nok\n"), "{out}");
    assert!(out.contains("1766|1\nok"), "{out}");
    setup.fsck_clean();
}

/// A shared mapping made read-only is stored to only after mprotect makes it writable (the
/// core starts tracking it then, LMDB's default mode never does); its stores reach the file at
/// msync; PROT_WRITE on a mapping of a read-only descriptor is EACCES, as on the kernel.
#[test]
fn a_read_only_mapping_made_writable_by_mprotect_reaches_the_file() {
    let s = setup();
    let script = r#"cd "$D" || exit 9
python3 - <<'PY'
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open("f", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.write(fd, b"a" * 65536)
os.fsync(fd)
addr = libc.mmap(None, 65536, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
print(ctypes.string_at(addr + 100, 4).decode())
os.pwrite(fd, b"seen", 200)
print(ctypes.string_at(addr + 200, 4).decode())
assert libc.mprotect(ctypes.c_void_p(addr), 65536, mmap.PROT_READ | mmap.PROT_WRITE) == 0
ctypes.memmove(addr + 100, b"prot", 4)
assert libc.msync(ctypes.c_void_p(addr), 65536, 4) == 0  # MS_SYNC
print(os.pread(fd, 4, 100).decode())
libc.munmap(ctypes.c_void_p(addr), 65536)
os.close(fd)
print(open("f", "rb").read()[100:104].decode())
ro = os.open("f", os.O_RDONLY)
addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, ro, 0)
rc = libc.mprotect(ctypes.c_void_p(addr), 4096, mmap.PROT_READ | mmap.PROT_WRITE)
print(rc, ctypes.get_errno())
PY
"#;
    let out = same_as_kernel(&s, script);
    assert_eq!(out, "aaaa\nseen\nprot\nprot\n-1 13\n");
}

#[test]
fn lmdb_with_write_mapped_commits() {
    if !common::has_python_lmdb() {
        eprintln!("skipped: /usr/bin/python3 has no lmdb module (python3-lmdb; scripts/install-deps.sh installs it)");
        return;
    }
    let setup = setup();
    // writemap=True: LMDB commits by storing into its shared writable mapping and msync.
    let out = same_as_kernel(&setup, common::LMDB_SCRIPT);
    assert!(out.contains("entries 8000 8000"), "{out}");
    setup.fsck_clean();
}

#[test]
fn python_mmap_stores_reach_the_file_at_flush_and_at_close() {
    let setup = setup();
    let script = r#"set -e
python3 - <<'PY'
import mmap, os
path = os.path.join(os.environ["D"], "m")
with open(path, "wb") as f:
    f.write(b"." * 3 * 4096)
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[5:10] = b"HELLO"
    m.flush()                      # msync
    m[4096:4101] = b"WORLD"
    print(os.pread(f.fileno(), 5, 4096))  # read sees the store before msync
    m.close()                      # munmap with an unsynced store
    os.fsync(f.fileno())
    m2 = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_COPY)
    m2[0:1] = b"P"                 # private: never the file's
    m2.close()
PY
python3 -c 'import os; d=open(os.path.join(os.environ["D"], "m"), "rb").read(); print(len(d), d[:12], d[4096:4102])'
"#;
    let out = same_as_kernel(&setup, script);
    assert!(
        out.contains("b'WORLD'\n12288 b'.....HELLO..' b'WORLD.'"),
        "{out}"
    );
    setup.fsck_clean();
}

#[test]
fn a_listing_that_renames_what_it_reads_ends() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::RENAME_WHILE_LISTING_SCRIPT);
    assert_eq!(out, "5000 5000 5000\n");
    setup.fsck_clean();
}

#[test]
fn holes_are_punched_found_and_copied_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::HOLES_SCRIPT);
    assert!(out.contains("f2 0 0 4096\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn calls_by_number_and_the_generic_ioctls_answer_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::RAW_CALLS_SCRIPT);
    assert!(
        out.contains("copy_file_range overlapping: -1 EINVAL\n"),
        "{out}"
    );
    assert!(out.contains("getdents64: 5 names\n"), "{out}");
    // Nothing reached the kernel's directory behind the prefix (calls by number used to).
    assert!(std::fs::read_dir(&setup.at).map_or(true, |mut d| d.next().is_none()));
    setup.fsck_clean();
}

#[test]
fn file_size_limits_readahead_io_uring_and_clone_vm_children_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::LIMITS_SCRIPT);
    assert!(out.contains("write crossing it: 2000\n"), "{out}");
    assert!(out.contains("before after\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn set_id_bits_long_relative_paths_bad_pointers_and_dropped_privileges_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::KERNEL_ANSWERS_SCRIPT);
    assert!(out.contains("2666 write 666 fallocate 666"), "{out}");
    assert!(out.contains("chown refused\n"), "{out}");
    assert!(out.contains("child open 1 EACCES\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn programs_with_their_own_allocator_and_redis_run_under_the_shim() {
    let setup = setup();
    let script = format!("PORT=16391\n{}", common::ALLOCATORS_SCRIPT);
    let out = same_as_kernel(&setup, &script);
    if std::path::Path::new("/usr/bin/redis-server").exists() {
        assert!(out.contains("v\n2\na\nb\nc\n"), "{out}");
    }
    setup.fsck_clean();
}

#[test]
fn spawned_children_get_the_descriptors_and_directory_handed_to_them() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::SPAWN_SCRIPT);
    assert_eq!(out, common::SPAWN_OUTPUT);
    setup.fsck_clean();
}

/// Embedded mode serves one process, but flock and OFD locks belong to open file descriptions:
/// two of them in the process conflict, and a fork or exec shares one with its locks.
#[test]
fn locks_of_descriptions_conflict_and_are_shared_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::DESCRIPTION_LOCKS_SCRIPT);
    assert_eq!(out, common::DESCRIPTION_LOCKS_OUTPUT);
    let out = same_as_kernel(&setup, common::SHARED_FLOCK_SCRIPT);
    assert_eq!(out, common::SHARED_FLOCK_OUTPUT);
    setup.fsck_clean();
}

#[test]
fn extended_attributes_and_acls_behave_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::XATTR_SCRIPT);
    assert!(out.contains("user:1234:rw-\t#effective:r--"), "{out}");
    assert!(out.contains("big E2BIG\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn a_directory_removed_while_open_is_fstat_able_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::REMOVED_DIR_SCRIPT);
    assert_eq!(out, "0 0o40750\n[]\n0 0o40700\n[]\n['over']\n");
    setup.fsck_clean();
}

#[test]
fn unnamed_files_are_written_and_named_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::TMPFILE_SCRIPT);
    assert_eq!(out, "0 0o100640\n[]\n0 1 hidden\n-1 ENOENT\n['visible']\n");
    setup.fsck_clean();
}

#[test]
fn ranges_collapse_and_insert_without_moving_data() {
    let setup = setup();
    let out = setup.run(common::RANGES_SCRIPT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), common::RANGES_OUTPUT);
    setup.fsck_clean();
}

#[test]
fn fiemap_maps_the_data_and_fionread_counts_what_is_left() {
    let setup = setup();
    let out = setup.run(common::FIEMAP_SCRIPT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), common::FIEMAP_OUTPUT);
    setup.fsck_clean();
}

#[test]
fn python_os_pathlib_shutil_tempfile() {
    let setup = setup();
    let script = r#"python3 - <<'PY'
import os, pathlib, shutil, tempfile
d = pathlib.Path(os.environ["D"])
(d / "p" / "q").mkdir(parents=True, exist_ok=True)
(d / "p" / "f.txt").write_text("hello\n" * 100)
with open(d / "p" / "f.txt", "a") as f:
    f.write("tail\n")
    f.flush()
    os.fsync(f.fileno())
shutil.copytree(d / "p", d / "p2")
fd, name = tempfile.mkstemp(dir=d / "p2", suffix=".tmp")
os.write(fd, b"temp")
os.close(fd)
print(os.path.getsize(name), pathlib.Path(name).read_bytes())
os.rename(name, d / "p2" / "renamed")
print(sorted(os.listdir(d / "p2")))
print(len((d / "p2" / "f.txt").read_text().splitlines()))
st = os.stat(d / "p2" / "f.txt")
print(st.st_size, oct(st.st_mode))
os.chmod(d / "p2" / "f.txt", 0o600)
print(oct(os.stat(d / "p2" / "f.txt").st_mode))
print(sorted(str(p.relative_to(d)) for p in d.rglob("*")))
shutil.rmtree(d / "p2")
print(os.path.exists(d / "p2"), os.path.realpath(d / "p" / "q" / ".."))
PY
"#;
    let plain = setup.run_plain(script);
    let ours = setup.run(script);
    let normal = |o: &Output, dir: &Path| {
        String::from_utf8_lossy(&o.stdout).replace(dir.to_str().unwrap(), "D")
    };
    assert!(plain.status.success(), "{}", text(&plain));
    assert!(
        ours.status.success() && ours.stderr.is_empty(),
        "{}",
        text(&ours)
    );
    assert_eq!(normal(&ours, &setup.at), normal(&plain, &setup.plain));
    setup.fsck_clean();
}

#[test]
fn programs_stored_on_nosefs_run_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::EXEC_SCRIPT);
    assert!(
        out.contains("./s3.sh spawned, exit 0\nmade, exit 7\nscript [./s.sh] [make]\n"),
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
    assert!(
        out.contains("script [./s.sh] [arg]\npython ['a', 'b']\nexit 7\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "found on PATH, exit 7\nnested [./s3.sh]\nnot executable, exit 126\nsubprocess 7\n"
        ),
        "{out}"
    );
}

#[test]
fn an_exec_adopts_inherited_descriptors_and_the_working_directory() {
    let setup = setup();
    // fd 3 is opened by the first shell, written, and inherited by the program it execs.
    let out = setup.run(
        r#"set -e
mkdir "$D/w"; cd "$D/w"
exec 3> log
echo one >&3
exec sh -c 'echo two >&3; pwd; echo three >> log; cat log'"#,
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expect = format!("{}/w\none\ntwo\nthree\n", setup.at.display());
    assert_eq!(stdout, expect, "{}", text(&out));
    setup.fsck_clean();
}

#[test]
fn redirections_reach_programs_that_write_through_stdio() {
    let setup = setup();
    // The shell opens the file and the exec'd program writes through glibc's stdout, whose
    // internal calls the shim never sees: the standard streams must follow descriptors 0-2.
    // `env` adopts and execs again before it mounts (a second hand-over of the same placeholders).
    let script = r#"set -e
printf 'b\na\nc\n' > "$D/f"
sort "$D/f" > "$D/out"; cat "$D/out"
sort -o "$D/o2" "$D/f"; cat "$D/o2"
sort "$D/f" "$D/f" > "$D/u0"; uniq -c "$D/u0" "$D/u1"; cat "$D/u1"
sort < "$D/f"
env cat < "$D/f"
env env sort < "$D/f" > "$D/o3"; cat "$D/o3"
python3 -c 'import sys; sys.stdout.write(sys.stdin.read().upper())' < "$D/f" > "$D/o4"; cat "$D/o4"
{ echo first; sort "$D/f"; echo last; } > "$D/o5"; cat "$D/o5"
ls -l "$D/missing" 2> "$D/err" || true; sed "s|$D|D|" "$D/err"
exec 3> "$D/shared"; exec 4>&3
echo one >&3
(echo two; sh -c 'echo three; echo four >&4') >&3
sh -c 'echo five' >&4
echo six >&3
od -c "$D/shared"
"#;
    let out = same_as_kernel(&setup, script);
    assert!(out.contains("B\nA\nC\nfirst\na\nb\nc\nlast\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn make_and_git_behave_as_on_the_kernel() {
    let setup = setup();
    // make and git spawn children one at a time and wait for them (embedded mode's one holder);
    // fixed dates make git's object names the same on both sides.
    let script = r#"set -e
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
mkdir "$D/proj" && cd "$D/proj"
printf 'all: out\nout: in\n\tcat in in > out\n' > Makefile
echo x > in
make && cat out && make
git init -q -b main .
git -c user.email=t@example.com -c user.name=t add Makefile in
git -c user.email=t@example.com -c user.name=t commit -qm first
echo y >> in
git diff --stat | cat
git -c user.email=t@example.com -c user.name=t commit -qam second
git log --format='%H %s' | cat
git status --short | cat
git fsck --no-progress 2>&1 | cat
"#;
    let out = same_as_kernel(&setup, script);
    assert!(
        out.contains(" second\n") && out.contains("?? out\n"),
        "{out}"
    );
    setup.fsck_clean();
}

#[test]
fn a_second_process_gets_ebusy_naming_the_holder() {
    let setup = setup();
    // The first program holds the image (a file open) until its stdin closes.
    let mut holder = Command::new(nosefs())
        .args(["run", "--image"])
        .arg(&setup.image)
        .arg("--at")
        .arg(&setup.at)
        .args(["--", "python3", "-c"])
        .arg("import os,sys; f=open(os.environ['D']+'/held','w'); print('ready', flush=True); sys.stdin.read()")
        .env("D", &setup.at)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "ready\n");
    let out = setup.run(r#"cat "$D/held"; echo "cat: $?""#);
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is in use by process"), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cat: 1"),
        "{}",
        text(&out)
    );
    setup.fsck_clean();
}

#[test]
fn sigkill_under_write_load_loses_nothing_fsynced() {
    let setup = setup();
    // Files are written and fsynced one after another; the name of each is printed only after
    // its fsync returned. The writer is killed mid-stream.
    let script = r#"python3 - <<'PY'
import os, sys
d = os.environ["D"]
i = 0
while True:
    name = os.path.join(d, f"f{i}")
    fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, (f"{i}:" * 1000).encode())
    os.fsync(fd)
    os.close(fd)
    print(i, flush=True)
    i += 1
PY
"#;
    let mut child = Command::new(nosefs())
        .args(["run", "--image"])
        .arg(&setup.image)
        .arg("--at")
        .arg(&setup.at)
        .args(["--", "sh", "-c", script])
        .env("D", &setup.at)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // Kill the whole process group of the writer (sh and python) with SIGKILL.
    Command::new("pkill")
        .args(["-KILL", "-f", "os.fsync\\(fd\\)"])
        .status()
        .unwrap();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let acknowledged: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert!(
        acknowledged.len() > 10,
        "the writer made too little progress: {out:?}"
    );
    // The next mount recovers; every acknowledged file is exact; fsck is clean after.
    let last = acknowledged.last().unwrap();
    let check = format!(
        r#"python3 -c '
import os
for i in range({}):
    got = open(os.path.join(os.environ["D"], f"f{{i}}")).read()
    if got != f"{{i}}:" * 1000:
        print("bad", i)
'"#,
        last + 1
    );
    let out = setup.run(&check);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        text(&out)
    );
    setup.fsck_clean();
}

#[test]
fn the_bench_target_runs_workloads_under_the_shim_and_cleans_up() {
    shim();
    let images = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = Command::new(nosefs())
        .args(["bench", "--quick", "--runs", "1", "--threads", "1"])
        .args([
            "--files",
            "300",
            "--writes",
            "64",
            "--target",
            "nosefs-preload",
        ])
        .args(["--workload", "dirops", "--workload", "fileops"])
        .args(["--workload", "calls", "--image-dir"])
        .arg(images.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    for row in [
        "| nosefs-preload | create | files=300 | 1 |",
        "| nosefs-preload | append+fsync |",
        "| nosefs-preload | lseek | - | 1 |",
        "| nosefs-preload | lseek-kernel | - | 1 |",
        "| nosefs-preload | fstat | - | 1 |",
        "| nosefs-preload | stat | - | 1 |",
        "| nosefs-preload | open-close | - | 1 |",
    ] {
        assert!(stdout.contains(row), "no row {row}:\n{}", text(&out));
    }
    assert!(!stdout.contains("not run"), "{}", text(&out));
    let left: Vec<_> = std::fs::read_dir(images.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn unix_sockets_bind_and_connect_by_nosefs_path() {
    let setup = setup();
    // The path holds a socket inode; the socket itself lives in the kernel's abstract namespace.
    let out = setup.run(
        r#"python3 - <<'PY'
import os, socket, stat
p = os.environ["D"] + "/sock"
s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(1)
print(stat.S_ISSOCK(os.stat(p).st_mode))
c = socket.socket(socket.AF_UNIX); c.connect(p)
a, _ = s.accept(); c.sendall(b"over noseFS"); print(a.recv(64).decode())
try:
    socket.socket(socket.AF_UNIX).bind(p)
except OSError as e:
    print("rebind:", e.strerror)
open(os.environ["D"] + "/plain", "w").close()
try:
    socket.socket(socket.AF_UNIX).connect(os.environ["D"] + "/plain")
except OSError as e:
    print("not a socket:", e.strerror)
os.unlink(p)
try:
    socket.socket(socket.AF_UNIX).connect(p)
except OSError as e:
    print("gone:", e.strerror)
print(os.listdir(os.environ["D"]))
PY"#,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "True\nover noseFS\nrebind: Address already in use\nnot a socket: Connection refused\ngone: No such file or directory\n['plain']\n",
        "{}",
        text(&out)
    );
    let kernel_side: Vec<_> = std::fs::read_dir(&setup.at).unwrap().collect();
    assert!(
        kernel_side.is_empty(),
        "the prefix's kernel directory got {kernel_side:?}"
    );
    setup.fsck_clean();
}

#[test]
fn glob_and_scandir_from_c_see_nosefs_directories() {
    // glibc's glob and scandir open directories through its internal opendir, which no preload
    // library sees: the shim must serve them itself.
    let setup = setup();
    let src = setup.plain.join("../gs.c");
    std::fs::write(
        &src,
        r#"#define _GNU_SOURCE
#include <dirent.h>
#include <ftw.h>
#include <glob.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
static size_t skip;
static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    printf("nftw %d %d %s %s %d\n", type, ftw->level, path + skip, path + ftw->base,
           S_ISREG(st->st_mode) ? (int)st->st_size : -1);
    return 0;
}
int main(int argc, char **argv) {
    skip = (size_t)atoi(argv[3]);
    if (argc > 4) return nftw(argv[4], visit, 8, FTW_PHYS | (argc > 5 ? FTW_DEPTH : 0)) ? 1 : 0;
    glob_t g;
    int rc = glob(argv[1], 0, NULL, &g);
    printf("glob %d\n", rc);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) printf("%s\n", g.gl_pathv[i] + atoi(argv[3]));
    if (rc == 0) globfree(&g);
    struct dirent **list;
    int n = scandir(argv[2], &list, NULL, alphasort);
    printf("scandir %d\n", n);
    for (int i = 0; i < n; i++) { printf("%s\n", list[i]->d_name); free(list[i]); }
    if (n >= 0) free(list);
    return 0;
}
"#,
    )
    .unwrap();
    let bin = setup.plain.join("../gs");
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", text(&cc));
    let script = format!(
        r#"set -e
mkdir -p "$D/g/sub"; touch "$D/g/b.txt" "$D/g/a.txt" "$D/g/c.log"
{bin} "$D/g/*.txt" "$D/g" ${{#D}}
{bin} "$D/nothing/*" "$D/g/sub" ${{#D}}
echo data > "$D/g/sub/f"; ln -s ../a.txt "$D/g/sub/link"
{bin} - - ${{#D}} "$D/g" | sort
{bin} - - ${{#D}} "$D/g/" depth | sort
"#,
        bin = bin.display()
    );
    let out = same_as_kernel(&setup, &script);
    assert!(out.contains("glob 0\n/g/a.txt\n/g/b.txt\n"), "{out}");
    assert!(out.contains("nftw 4 2 /g/sub/link link -1\n"), "{out}");
    assert!(out.contains("nftw 5 1 /g/sub sub -1\n"), "{out}");
    setup.fsck_clean();
}

#[test]
fn posix_spawn_file_actions_change_directory_and_open_as_on_the_kernel() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::SPAWN_CHDIR_SCRIPT);
    assert_eq!(
        out,
        "sub\nin sub\nexit 0\ninner\nin inner\nexit 0\ninner\nin inner\nexit 0\n\
         sub\nin sub\nexit 0\ntmp\nexit 1\n\
         spawn: No such file or directory\nspawn: Not a directory\n\
         exit 0\nwritten by the child\nspawn: No such file or directory\n"
    );
}

#[test]
fn shared_objects_stored_on_nosefs_load_with_dlopen() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::DLOPEN_SCRIPT);
    assert_eq!(
        out,
        "answer 42 loaded once: True\nmissing: True\nbare name: found\n\
         by the program runpath: found\n"
    );
}

#[test]
fn programs_are_found_through_path_directories_on_nosefs() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::PATH_SEARCH_SCRIPT);
    assert_eq!(
        out,
        "symlink to a kernel program runs\nfound on a PATH directory here\nposix_spawnp\n\
         e2 exit 0\nscript [posix_spawnp]\ns exit 0\nscript [execvp]\n\
         missing No such file or directory\nnoexec Permission denied\n"
    );
}

#[test]
fn splice_moves_data_between_nosefs_files_and_pipes() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::SPLICE_SCRIPT);
    assert!(
        out.ends_with(
            "pipe to file at an offset 2\nb'thrXYgh the pipe'\ntwo files: Bad file descriptor\n"
        ),
        "{out}"
    );
}

#[test]
fn posix_asynchronous_io_reads_and_writes_nosefs_files() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::aio::POSIX_SCRIPT);
    assert_eq!(out, common::aio::POSIX_OUTPUT);
}

#[test]
fn linux_asynchronous_io_is_served_for_nosefs_files() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::aio::LINUX_SCRIPT);
    assert_eq!(out, common::aio::LINUX_OUTPUT);
}

#[test]
fn mappings_resize_and_sparse_files_map_whole() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::MREMAP_SCRIPT);
    assert_eq!(
        out,
        "after resize 8192 b'first' b'second'\nshrunk 100 b'first'\nfile b'first' b''\n\
         4 GiB sparse, its tail: b'  DEARdear  '\n"
    );
}

#[test]
fn opens_that_create_never_fail_while_the_name_comes_and_goes() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::CREATE_RACE_SCRIPT);
    assert_eq!(
        out,
        "opens with O_CREAT that failed while the name came and went: 0\n"
    );
}

#[test]
fn unix_datagrams_reach_sockets_bound_on_nosefs_by_path() {
    let setup = setup();
    let out = same_as_kernel(&setup, common::DATAGRAM_SCRIPT);
    assert_eq!(
        out,
        "received b'hello'\nreceived b'direct'\ngetsockname: named\ngetpeername: stream\n"
    );
}

/// Unmounts the tmpfs at its path when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_file_system_under_the_image_answers_enospc_and_keeps_what_was_written() {
    // An image larger than the tmpfs it lies in: it is sparse, and the tmpfs fills before the
    // image does. A store into a page the tmpfs cannot give would be SIGBUS; the block
    // allocator reserves pages before it hands blocks out, so the writer gets ENOSPC.
    let is_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if !is_root {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "none"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(mounted.success());
    let _unmount = Unmount(small.clone());
    let image = small.join("image");
    let out = Command::new(nosefs())
        .args(["mkfs", image.to_str().unwrap(), "--size", "96M"])
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs: {out:?}");
    let at = dir.path().join("nose");
    let run = |script: &str| {
        shim();
        let out = Command::new(nosefs())
            .args(["run", "--image"])
            .arg(&image)
            .arg("--at")
            .arg(&at)
            .args(["--", "sh", "-c", script])
            .env("D", &at)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let written = run("dd if=/dev/zero of=$D/f bs=1M count=64 2>&1; echo \"dd: $?\"");
    assert!(
        written.contains("No space left on device") && written.contains("dd: 1"),
        "{written}"
    );
    // The next mount finds what dd wrote, and names still come and go.
    let after = run(
        "n=$(wc -c < $D/f); cmp -n $n $D/f /dev/zero && echo \"same $n\"; \
                     touch $D/g && rm $D/f $D/g && ls -A $D | wc -l",
    );
    let mut lines = after.lines();
    let same = lines.next().unwrap_or_default();
    let bytes: u64 = same
        .strip_prefix("same ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{after}"));
    assert!(bytes > 8 << 20 && bytes < 24 << 20, "{after}");
    assert_eq!(lines.next(), Some("0"), "{after}");
    // Another program takes the rest of the tmpfs: fsck still checks the image, reading none of
    // its holes (each would be a page the tmpfs cannot give: SIGBUS).
    let filled = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dd if=/dev/zero of={}/filler bs=1M 2>/dev/null; true",
            small.display()
        ))
        .status()
        .unwrap();
    assert!(filled.success());
    // New names need pinode pages the tmpfs has no more room for: ENOSPC, and the shell lives on.
    let created = run(
        "n=0; for i in $(seq 3000); do touch $D/g$i 2>/dev/null || break; n=$i; done; \
         echo $n; ls -A $D | wc -l",
    );
    // (`touch` creates, then sets the times: the one it stopped at may exist.)
    let counts: Vec<u64> = created
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        counts.len() == 2
            && counts[0] > 0
            && counts[0] < 3000
            && (counts[0]..=counts[0] + 1).contains(&counts[1]),
        "names made, then listed: {created}"
    );
    let out = Command::new(nosefs())
        .arg("fsck")
        .arg(&image)
        .output()
        .unwrap();
    assert!(out.status.success(), "fsck on a full tmpfs: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("clean"),
        "{}",
        text(&out)
    );
}
