//! Record locks, OFD locks and flock between clients and FUSE users, kept per process and file
//! or per description as the kernel keeps them; SQLite's locking between processes.

use super::*;

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

/// flock locks belong to the open file description, which a fork or exec shares: a lock
/// flock(1) takes through a shell's descriptor stays after flock exits (`exec 9>f; flock 9`),
/// and one a forked child takes holds off other descriptions until the last close.
#[test]
fn flock_through_a_shared_description_stays_with_it_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::SHARED_FLOCK_SCRIPT);
    assert_eq!(out, common::SHARED_FLOCK_OUTPUT);
    m.unmount_and_fsck();
}

/// flock and OFD locks through two descriptions of one file in one process conflict; through
/// duplicates of one they do not; ranges from the end, a read-only description's write lock and
/// F_OFD_GETLK answer as on the kernel.
#[test]
fn locks_of_two_descriptions_in_one_process_conflict_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::DESCRIPTION_LOCKS_SCRIPT);
    assert_eq!(out, common::DESCRIPTION_LOCKS_OUTPUT);
    m.unmount_and_fsck();
}

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
