//! Scripts of locks the end-to-end tests compare with a kernel directory: flock through a
//! description a fork or exec shares, and the locks of two descriptions in one process.

/// flock locks belong to the open file description, which a fork or exec shares (daemon and
/// embedded tests).
#[allow(dead_code)]
pub const SHARED_FLOCK_SCRIPT: &str = r#"cd "$D"
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

#[allow(dead_code)]
pub const SHARED_FLOCK_OUTPUT: &str =
    "locked through 9\nheld by the shell's description\nfree after close\n\
a forked child locked the shared description\nfree after the last close\n";

/// flock and OFD locks between two descriptions of one file in one process, and what a forked
/// child sees of them (daemon and embedded tests).
#[allow(dead_code)]
pub const DESCRIPTION_LOCKS_SCRIPT: &str = r#"cd "$D"
python3 - <<'PY'
import errno, fcntl, os, struct
with open("f", "w") as f:
    f.write("x" * 100)
a = os.open("f", os.O_RDWR)
b = os.open("f", os.O_RDWR)
fcntl.flock(a, fcntl.LOCK_EX)
try:
    fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("flock: the second description got it")
except BlockingIOError:
    print("flock: the second description refused")
fcntl.flock(os.dup(a), fcntl.LOCK_EX | fcntl.LOCK_NB)
print("flock: a duplicate of the holder takes it again")
fcntl.flock(a, fcntl.LOCK_UN)
fcntl.flock(b, fcntl.LOCK_SH | fcntl.LOCK_NB)
print("flock: free after the unlock")
fcntl.flock(b, fcntl.LOCK_UN)

def ofd(fd, cmd, kind, start, length, whence=os.SEEK_SET):
    lock = struct.pack("hhqqi", kind, whence, start, length, 0)
    return struct.unpack("hhqqi", fcntl.fcntl(fd, cmd, lock))

def try_ofd(what, fd, kind, start, length, whence=os.SEEK_SET):
    try:
        ofd(fd, fcntl.F_OFD_SETLK, kind, start, length, whence)
        print(what, "granted")
    except OSError as e:
        print(what, errno.errorcode[e.errno])

ofd(a, fcntl.F_OFD_SETLK, fcntl.F_WRLCK, 0, 10)
try_ofd("ofd: an overlapping write lock", b, fcntl.F_WRLCK, 5, 10)
try_ofd("ofd: a disjoint write lock", b, fcntl.F_WRLCK, 10, 10)
print("ofd: the conflict found", ofd(b, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, 0, 1))
try_ofd("ofd: 95 bytes before the end", b, fcntl.F_WRLCK, -95, 2, os.SEEK_END)
try_ofd("ofd: 80 bytes before the end", b, fcntl.F_WRLCK, -80, 2, os.SEEK_END)
try_ofd("ofd: a write lock through a read-only description", os.open("f", os.O_RDONLY), fcntl.F_WRLCK, 50, 1)
fcntl.flock(a, fcntl.LOCK_EX)
pid = os.fork()
if pid == 0:
    mine = os.open("f", os.O_RDWR)
    try:
        fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os._exit(1)
    except BlockingIOError:
        pass
    fcntl.flock(a, fcntl.LOCK_UN)
    fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("fork: the child was refused, then unlocked the shared description:", os.waitstatus_to_exitcode(status))
PY
"#;

#[allow(dead_code)]
pub const DESCRIPTION_LOCKS_OUTPUT: &str = "flock: the second description refused\n\
flock: a duplicate of the holder takes it again\nflock: free after the unlock\n\
ofd: an overlapping write lock EAGAIN\nofd: a disjoint write lock granted\n\
ofd: the conflict found (1, 0, 0, 10, -1)\nofd: 95 bytes before the end EAGAIN\n\
ofd: 80 bytes before the end granted\n\
ofd: a write lock through a read-only description EBADF\n\
fork: the child was refused, then unlocked the shared description: 0\n";
