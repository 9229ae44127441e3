//! Helpers the end-to-end tests share.

pub mod aio;

use std::path::Path;
use std::process::Output;

/// A process's status, stdout and stderr, for assertion messages.
#[allow(dead_code)]
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that a script run on noseFS (in `ours_dir`) printed what the same script printed on a
/// kernel directory (`plain_dir`; each directory's name reads `$D`), that both succeeded, and
/// that noseFS's run printed nothing on stderr. Returns noseFS's stdout.
#[allow(dead_code)]
pub fn assert_same_as_kernel(
    ours: &Output,
    ours_dir: &Path,
    plain: &Output,
    plain_dir: &Path,
) -> String {
    assert!(
        plain.status.success(),
        "on the kernel directory: {}",
        text(plain)
    );
    let normal = |o: &Output, dir: &Path| {
        String::from_utf8_lossy(&o.stdout).replace(dir.to_str().unwrap(), "$D")
    };
    assert_eq!(
        normal(ours, ours_dir),
        normal(plain, plain_dir),
        "\nunder the shim: {}\non the kernel: {}",
        text(ours),
        text(plain)
    );
    assert!(
        ours.status.success() && ours.stderr.is_empty(),
        "{}",
        text(ours)
    );
    String::from_utf8_lossy(&ours.stdout).into_owned()
}

/// Calls by number through `syscall()` (the shim routes the numbers of the calls it serves to
/// the same hooks as libc's functions) and the ioctls every file system answers, compiled and
/// run in `$D`; prints the same on a kernel directory.
#[allow(dead_code)]
pub const RAW_CALLS_SCRIPT: &str = concat!(
    "cd \"$D\"\ncat > raw.c <<'EOF'\n",
    include_str!("raw_calls.c"),
    "EOF\ncc -Wall -O2 -o raw raw.c\n./raw\n"
);

/// The file size limit (RLIMIT_FSIZE: cut writes, EFBIG with SIGXFSZ), readahead, fallocate's
/// refused modes, io_uring set up by number, and a clone(CLONE_VM) child that ends while its
/// parent goes on with its files: what stress-ng's file stressors found the shim answering
/// differently. Compiled and run in `$D`; prints the same on a kernel directory.
#[allow(dead_code)]
pub const LIMITS_SCRIPT: &str = concat!(
    "cd \"$D\"\ncat > limits.c <<'EOF'\n",
    include_str!("limits.c"),
    "EOF\ncc -Wall -O2 -o limits limits.c\n./limits\n"
);

/// Holes made and found through a frontend: fallocate(1) punching and digging, cp's sparse copy
/// (it asks lseek for SEEK_DATA and SEEK_HOLE), python's lseek; as on a kernel directory.
#[allow(dead_code)]
pub const HOLES_SCRIPT: &str = r#"set -e
cd "$D"
python3 -c "
with open('f', 'wb') as f:
    f.write(b'a' * 1048576); f.write(bytes(1048576)); f.write(b'b' * 1048576)
"
fallocate --punch-hole -o 4096 -l 65536 f
cp f f2
fallocate --dig-holes f2
cp --sparse=always f2 h
python3 -c "
import os
for name, at in (('f', 0), ('f', 70000), ('f2', 0), ('f2', 1048576), ('h', 5000)):
    fd = os.open(name, os.O_RDONLY)
    print(name, at, os.lseek(fd, at, os.SEEK_DATA), os.lseek(fd, at, os.SEEK_HOLE))
    os.close(fd)
"
md5sum f f2 h
"#;

/// A program that renames every entry of a 5,000-entry directory as it lists it: the listing
/// must end (each renamed name comes back at a new place after the cursor).
#[allow(dead_code)]
pub const RENAME_WHILE_LISTING_SCRIPT: &str = r#"set -e
cd "$D"
mkdir d && cd d
python3 -c "
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
"
"#;

/// Extended attributes and ACLs through a frontend: setfattr/getfattr in every namespace;
/// python's os.*xattr with their errors and limits; setfacl/getfacl with named entries, the
/// mask, chmod, default ACLs inherited by a file and a directory; cp -a and rsync -aAX carrying
/// both; as on a kernel directory (tmpfs).
#[allow(dead_code)]
pub const XATTR_SCRIPT: &str = r#"cd "$D"
set -e
umask 022
echo data > f
setfattr -n user.colour -v blue f
setfattr -n user.empty f
setfattr -n trusted.overlay.opaque -v y f
python3 -c "
import os, errno
os.setxattr('f', 'user.py', b'\x00\x01binary')
print(sorted(os.listxattr('f')))
print(os.getxattr('f', 'user.py'))
for what, call in (
    ('create', lambda: os.setxattr('f', 'user.colour', b'x', os.XATTR_CREATE)),
    ('replace', lambda: os.setxattr('f', 'user.none', b'x', os.XATTR_REPLACE)),
    ('get', lambda: os.getxattr('f', 'user.none')),
    ('remove', lambda: os.removexattr('f', 'user.none')),
    ('big', lambda: os.setxattr('f', 'user.big', b'x' * 65537)),
    ('namespace', lambda: os.setxattr('f', 'bogus.x', b'x')),
):
    try:
        call()
        print(what, 'ok')
    except OSError as e:
        print(what, errno.errorcode[e.errno])
os.removexattr('f', 'user.py')
os.setxattr('f', 'user.max', b'm' * 65536)
print(len(os.getxattr('f', 'user.max')))
os.removexattr('f', 'user.max')
"
getfattr -d -m - f | sort
setfacl -m u:1234:rw,g:55:r f
getfacl -n f
ls -l f | cut -c1-11
chmod 640 f
getfacl -n f
mkdir d
setfacl -d -m u:1234:rwx,o::- d
touch d/new
mkdir d/sub
getfacl -n d/new d/sub
stat -c '%A %n' d/new d/sub
cp -a f d/copy
getfattr -d -m - d/copy | sort
setfacl -b f
getfacl -n f
ls -l f | cut -c1-11
"#;

/// After [`XATTR_SCRIPT`], with another process: rsync -aAX (its receiver is a forked process,
/// which the embedded shim cannot serve) copying attributes and ACLs.
#[allow(dead_code)]
pub const XATTR_RSYNC_SCRIPT: &str = r#"cd "$D"
set -e
mkdir r
rsync -aAX f d r/
find r | sort | xargs getfacl -n
getfattr -R -d -m user r | sort
"#;

/// After [`XATTR_RSYNC_SCRIPT`], as root: another user is refused by an ACL entry naming it where the
/// mode's other bits would let it read, and let in by one that grants it.
#[allow(dead_code)]
pub const XATTR_OTHER_USER_SCRIPT: &str = r#"cd "$D"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_nobody sh -c 'cat r/f 2>&1 || true'
setfacl -m u:nobody:r r/f
chmod 711 r
as_nobody cat r/f
setfacl -m u:nobody:- r/f
as_nobody sh -c 'test -r r/f && echo readable || echo not readable'
"#;

/// A directory removed (rmdir, and rename over it) while open: fstat reports it with no links and
/// it lists as empty; as on a kernel directory.
#[allow(dead_code)]
pub const REMOVED_DIR_SCRIPT: &str = r#"cd "$D"
python3 - <<'PY'
import os, errno
os.mkdir('rd', 0o750)
os.mkdir('over', 0o700)
os.mkdir('new')
fds = [os.open('rd', os.O_RDONLY | os.O_DIRECTORY), os.open('over', os.O_RDONLY | os.O_DIRECTORY)]
os.rmdir('rd')
os.rename('new', 'over')
for fd in fds:
    st = os.fstat(fd)
    print(st.st_nlink, oct(st.st_mode))
    try:
        print(os.listdir(fd))
    except OSError as e:
        print('listdir', errno.errorcode[e.errno])
    os.close(fd)
print(sorted(os.listdir('.')))
PY
"#;

/// O_TMPFILE: a file written with no name, fstat'd (no links), named by linkat with
/// AT_EMPTY_PATH; one opened with O_EXCL can never be named; as on a kernel directory.
#[allow(dead_code)]
pub const TMPFILE_SCRIPT: &str = r#"cd "$D"
python3 - <<'PY'
import os, ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o640)
os.write(fd, b'hidden\n')
st = os.fstat(fd); print(st.st_nlink, oct(st.st_mode))
print(sorted(os.listdir('.')))
rc = libc.linkat(fd, b"", -100, b"visible", 0x1000)
print(rc, os.stat('visible').st_nlink, open('visible').read(), end='')
os.close(fd)
fd = os.open('.', os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
rc = libc.linkat(fd, b"", -100, b"never", 0x1000)
print(rc, errno.errorcode[ctypes.get_errno()])
os.close(fd)
print(sorted(os.listdir('.')))
PY
"#;

/// fallocate(1) collapsing and inserting ranges (tmpfs has neither: the expected output is
/// written here, from ext4's behaviour): 16 KiB of a pattern, block 1 collapsed out, 8 KiB
/// inserted at the start, then an unaligned range refused.
#[allow(dead_code)]
pub const RANGES_SCRIPT: &str = r#"cd "$D"
python3 -c "open('f', 'wb').write(bytes(range(256)) * 64)"
fallocate --collapse-range -o 4096 -l 4096 f
fallocate --insert-range -o 0 -l 8192 f
python3 -c "
data = bytes(range(256)) * 64
want = bytes(8192) + data[:4096] + data[8192:]
got = open('f', 'rb').read()
print(len(got), got == want)
"
fallocate --collapse-range -o 100 -l 4096 f 2>&1 | sed 's/.*: //'
"#;

/// What [`RANGES_SCRIPT`] prints.
#[allow(dead_code)]
pub const RANGES_OUTPUT: &str = "20480 True\nInvalid argument\n";

/// FIEMAP (through python's ioctl; tmpfs has none, so the expected output is written here) and
/// FIONREAD on a file with a hole: two runs of data, the last flagged.
#[allow(dead_code)]
pub const FIEMAP_SCRIPT: &str = r#"cd "$D"
python3 - <<'PY'
import fcntl, os, struct, termios
fd = os.open('f', os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b'a' * 8192, 0)
os.pwrite(fd, b'b' * 4096, 65536)
buf = bytearray(struct.pack('=QQIIII', 0, 2**64 - 1, 1, 0, 8, 0) + bytes(56 * 8))
fcntl.ioctl(fd, 0xC020660B, buf)
n = struct.unpack_from('=I', buf, 20)[0]
for i in range(n):
    lo, ph, ln = struct.unpack_from('=QQQ', buf, 32 + 56 * i)
    print(lo, ln, hex(struct.unpack_from('=I', buf, 32 + 56 * i + 40)[0]))
os.lseek(fd, 100, 0)
print(struct.unpack('i', fcntl.ioctl(fd, termios.FIONREAD, b'\0' * 4))[0])
PY
"#;

/// What [`FIEMAP_SCRIPT`] prints.
#[allow(dead_code)]
pub const FIEMAP_OUTPUT: &str = "0 8192 0x0\n65536 4096 0x1\n69532\n";

/// Children started by posix_spawn (with dup2 and close file actions, and without), system and
/// popen write to the descriptors their parent handed them, and start in its directory.
#[allow(dead_code)]
pub const SPAWN_SCRIPT: &str = r#"set -e
cd "$D"
mkdir -p sub
python3 - <<'PY'
import os
env = dict(os.environ)
fd = os.open("spawned", os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o644)
actions = [(os.POSIX_SPAWN_DUP2, fd, 1), (os.POSIX_SPAWN_DUP2, fd, 2)]
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "echo to-stdout; echo to-stderr >&2"], env,
                     file_actions=actions)
assert os.waitpid(pid, 0)[1] == 0
os.write(fd, b"parent-after-the-child\n")
kept = os.open("kept", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.set_inheritable(kept, True)
os.chdir("sub")
pid = os.posix_spawnp("sh", ["sh", "-c", f"echo inherited >&{kept}; basename $(pwd) >&{kept}"], env)
assert os.waitpid(pid, 0)[1] == 0
pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"(echo closed >&{kept}) 2>/dev/null || echo was-closed"],
                     env, file_actions=[(os.POSIX_SPAWN_CLOSE, kept)])
assert os.waitpid(pid, 0)[1] == 0
os.close(kept)
os.close(fd)
PY
python3 -c 'import os; print("parent", flush=True); os.system("echo from-system")' > system.out
python3 -c 'import os; p = os.popen("cat system.out; echo from-popen"); print(p.read(), end=""); p.close()' > popen.out
cat spawned kept system.out popen.out
"#;

/// What [`SPAWN_SCRIPT`] prints.
#[allow(dead_code)]
pub const SPAWN_OUTPUT: &str = "was-closed\nto-stdout\nto-stderr\nparent-after-the-child\ninherited\nsub\nparent\nfrom-system\nparent\nfrom-system\nfrom-popen\n";

/// LMDB with `writemap`: commits are stores into its shared writable mapping and msync.
#[allow(dead_code)]
pub const LMDB_SCRIPT: &str = r#"set -e
/usr/bin/python3 - <<'PY'
import hashlib, lmdb, os
path = os.path.join(os.environ["D"], "lm")
env = lmdb.open(path, map_size=64 << 20, writemap=True, metasync=True, sync=True)
for r in range(5):
    with env.begin(write=True) as txn:
        for i in range(2000):
            k = r * 2000 + i
            txn.put(b"k%06d" % k, hashlib.sha256(b"%d" % k).digest() * 3)
with env.begin(write=True) as txn:
    for k in range(0, 10000, 5):
        txn.delete(b"k%06d" % k)
env.close()
PY
/usr/bin/python3 - <<'PY'
import hashlib, lmdb, os
env = lmdb.open(os.path.join(os.environ["D"], "lm"), map_size=64 << 20, readonly=True)
with env.begin() as txn:
    n = 0
    for key, value in txn.cursor():
        k = int(key[1:])
        assert k % 5 != 0 and value == hashlib.sha256(b"%d" % k).digest() * 3, key
        n += 1
    print("entries", n, txn.stat()["entries"])
PY
"#;

/// Whether /usr/bin/python3 has the lmdb module (python3-lmdb; scripts/install-deps.sh installs
/// it).
#[allow(dead_code)]
pub fn has_python_lmdb() -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import lmdb"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Programs stored on the file system run: a `#!` script (also through `env`, and one whose
/// interpreter is itself a script there), a compiled program (found by path and on PATH, and
/// from python's subprocess, posix_spawn and make, and by descriptor: fexecve and execveat),
/// and a script without execute permission is refused (and a script whose descriptor is
/// close-on-exec, by fexecve). Prints the same on a kernel directory.
#[allow(dead_code)]
pub const EXEC_SCRIPT: &str = r##"set -e
cd "$D"
printf '#!/bin/sh\necho "script [$0] [$1]"\n' > s.sh && chmod +x s.sh && ./s.sh arg
printf '#!/usr/bin/env python3\nimport sys\nprint("python", sys.argv[1:])\n' > p.py
chmod +x p.py && ./p.py a b
printf 'int main(int c, char **v) { return c == 2 ? 7 : 1; }\n' > p.c && cc -o p p.c
./p x || echo "exit $?"
mkdir -p bin && cp p bin/q && { PATH="$PWD/bin:$PATH" q y || echo "found on PATH, exit $?"; }
printf '#!/bin/sh\necho "nested [$1]"\n' > s2.sh && chmod +x s2.sh
printf '#!%s/s2.sh\n' "$PWD" > s3.sh && chmod +x s3.sh && ./s3.sh
chmod -x s.sh && { ./s.sh 2>/dev/null || echo "not executable, exit $?"; }
python3 -c 'import subprocess; print("subprocess", subprocess.run(["./p", "z"]).returncode)'
chmod +x s.sh
python3 -c '
import os
for p in ["./p", "./s.sh", "./s3.sh"]:
    pid = os.posix_spawn(p, [p, "spawned"], os.environ)
    print(p, "spawned, exit", os.waitpid(pid, 0)[1] >> 8)
'
printf 'all:\n\t./p make || echo "made, exit $$?"\n\t./s.sh make\n' > Makefile && make -s
printf '#!/bin/sh\necho "by descriptor [$1]"\n' > f.sh && chmod +x f.sh
python3 -c '
import os
for p in ["./p", "./f.sh"]:
    for inherit in [False, True]:
        pid = os.fork()
        if pid == 0:
            fd = os.open(p, os.O_RDONLY)
            os.set_inheritable(fd, inherit)
            try:
                os.execve(fd, [p, "fexecve"], os.environ)
            except OSError as e:
                print(p, "fexecve:", e.strerror)
                os._exit(99)
        how = "inheritable" if inherit else "close-on-exec"
        print(p, how, "by descriptor, exit", os.waitpid(pid, 0)[1] >> 8)
'
cat > e.c <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
extern char **environ;
int main(int c, char **v) {
    char *args[] = {"p", "execveat", 0};
    if (v[1][0] == 'd')
        execveat(open(".", O_RDONLY | O_DIRECTORY), "p", args, environ, 0);
    else
        execveat(open("p", O_RDONLY), "", args, environ, AT_EMPTY_PATH);
    perror("execveat");
    return 2;
}
EOF
cc -o e e.c
./e dir || echo "execveat in a directory, exit $?"
./e empty || echo "execveat of a descriptor, exit $?"
chmod -x p && { ./e empty 2>/dev/null || echo "execveat of a program not executable, exit $?"; }
"##;

/// posix_spawn file actions that change the child's directory (`addchdir_np`, relative, nested
/// and absolute, `addfchdir_np`, into a kernel directory, a missing one, a file), as Rust's
/// `Command::current_dir` uses them, and that open its standard output (`addopen`, and one in a
/// missing directory). Prints the same on a kernel directory.
#[allow(dead_code)]
pub const SPAWN_CHDIR_SCRIPT: &str = r##"set -e
cd "$D"
mkdir -p sub/inner && echo "in sub" > sub/here.txt && echo "in inner" > sub/inner/here.txt
cat > sp.c <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
extern char **environ;
int main(int c, char **v) {
    posix_spawn_file_actions_t a;
    posix_spawn_file_actions_init(&a);
    for (int i = 2; i < c; i++) {
        if (v[1][0] == 'f')
            posix_spawn_file_actions_addfchdir_np(&a, open(v[i], O_RDONLY | O_DIRECTORY));
        else
            posix_spawn_file_actions_addchdir_np(&a, v[i]);
    }
    char *args[] = {"/bin/sh", "-c", "basename \"$(pwd)\"; cat here.txt 2>/dev/null", 0};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", &a, 0, args, environ);
    if (rc) {
        printf("spawn: %s\n", strerror(rc));
        return 1;
    }
    int st;
    waitpid(pid, &st, 0);
    printf("exit %d\n", WEXITSTATUS(st));
    return 0;
}
EOF
cc -o sp sp.c
./sp p sub
./sp p sub inner
./sp p "$PWD/sub/inner"
./sp f sub
./sp p /tmp
./sp p missing || true
./sp p sub/here.txt || true
cat > so.c <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
extern char **environ;
int main(int c, char **v) {
    posix_spawn_file_actions_t a;
    posix_spawn_file_actions_init(&a);
    posix_spawn_file_actions_addopen(&a, 1, v[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *args[] = {"/bin/echo", "written by the child", 0};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/echo", &a, 0, args, environ);
    posix_spawn_file_actions_destroy(&a);
    if (rc) {
        printf("spawn: %s\n", strerror(rc));
        return 1;
    }
    int st;
    waitpid(pid, &st, 0);
    printf("exit %d\n", WEXITSTATUS(st));
    return 0;
}
EOF
cc -o so so.c
./so out.txt && cat out.txt
./so missing/out.txt || true
"##;

/// Shared objects stored on the file system load with dlopen (twice: one object), a missing one
/// fails as on the kernel, and dlopen by a bare name still searches the calling program's
/// RUNPATH (the shim's dlopen reaches the real one by a jump, keeping the caller). Prints the
/// same on a kernel directory.
#[allow(dead_code)]
pub const DLOPEN_SCRIPT: &str = r##"cd "$D"
printf 'int answer(void) { return 42; }\n' > lib.c && cc -shared -fPIC -o libanswer.so lib.c
python3 -c '
import ctypes
a = ctypes.CDLL("./libanswer.so")
b = ctypes.CDLL("./libanswer.so")
print("answer", a.answer(), "loaded once:", a._handle == b._handle)
try:
    ctypes.CDLL("./missing.so")
except OSError as e:
    print("missing:", "cannot open shared object file" in str(e))
import subprocess
'
printf '#include <dlfcn.h>\n#include <stdio.h>\nint main(void) { void *h = dlopen("libm.so.6", RTLD_NOW); printf("bare name: %%s\\n", h ? "found" : dlerror()); return 0; }\n' > bare.c && cc -o bare bare.c && ./bare
K=$(mktemp -d) && cp libanswer.so "$K/" && printf '#include <dlfcn.h>\n#include <stdio.h>\nint main(void) { void *h = dlopen("libanswer.so", RTLD_NOW); printf("by the program runpath: %%s\\n", h ? "found" : "not found"); return 0; }\n' > rp.c && cc -o "$K/rp" rp.c -Wl,-rpath,"$K" && "$K/rp"; rm -rf "$K"
"##;

/// Programs found through a PATH directory on the file system (posix_spawnp, execvp; a symlink
/// there to a program outside, a `#!` script, one not executable, one missing), and a symlink
/// to a program outside run by path. Prints the same on a kernel directory.
#[allow(dead_code)]
pub const PATH_SEARCH_SCRIPT: &str = r##"cd "$D"
ln -s /bin/echo t && ./t "symlink to a kernel program runs"
mkdir bin && ln -s /bin/echo bin/e2 && PATH=$PWD/bin:$PATH e2 "found on a PATH directory here"
printf '#!/bin/sh\necho "script [$1]"\n' > bin/s && chmod +x bin/s
printf 'x' > bin/noexec
PATH=$PWD/bin:$PATH python3 -c '
import os
for name in ["e2", "s"]:
    pid = os.posix_spawnp(name, [name, "posix_spawnp"], os.environ)
    print(name, "exit", os.waitpid(pid, 0)[1] >> 8)
pid = os.fork()
if pid == 0:
    os.execvp("s", ["s", "execvp"])
os.waitpid(pid, 0)
for name in ["missing", "noexec"]:
    try:
        os.posix_spawnp(name, [name], os.environ)
    except OSError as e:
        print(name, e.strerror)
'
"##;

/// splice between files on the file system and pipes: from the description's offset (moved by
/// what the pipe took) and from a given one, a large one bounded by the pipe, into a file at
/// its offset and at a given one, and a closed descriptor. Prints the same on a kernel
/// directory.
#[allow(dead_code)]
pub const SPLICE_SCRIPT: &str = r##"cd "$D"
python3 -c '
import os
with open("src", "wb") as f:
    f.write(bytes(range(256)) * 1024)
fd = os.open("src", os.O_RDONLY)
r, w = os.pipe()
print("file to pipe", os.splice(fd, w, 5), "offset now", os.lseek(fd, 0, os.SEEK_CUR))
print("read", os.read(r, 100))
print("at an offset", os.splice(fd, w, 4, offset_src=100), "offset still", os.lseek(fd, 0, os.SEEK_CUR))
print("read", os.read(r, 100))
n = os.splice(fd, w, 1 << 20)
print("a large one fits the pipe:", 0 < n <= 65536, "offset moved by it:", os.lseek(fd, 0, os.SEEK_CUR) == 5 + n)
os.read(r, 1 << 20)
out = os.open("dst", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(w, b"through the pipe")
print("pipe to file", os.splice(r, out, 100))
os.write(w, b"XY")
print("pipe to file at an offset", os.splice(r, out, 2, offset_dst=3))
os.close(out)
print(open("dst", "rb").read())
try:
    os.splice(fd, out, 1)
except OSError as e:
    print("two files:", e.strerror)
'
"##;

/// A mapping grown and shrunk with mremap (Python's `mmap.resize`), its stores kept, and a
/// 4 GiB sparse file mapped whole to read its tail. Prints the same on a kernel directory.
#[allow(dead_code)]
pub const MREMAP_SCRIPT: &str = r##"cd "$D"
python3 -c '
import mmap, os
with open("grow", "w+b") as f:
    f.write(b"a" * 4096)
    f.flush()
    m = mmap.mmap(f.fileno(), 4096)
    m[:5] = b"first"
    f.truncate(8192)
    m.resize(8192)
    m[4096:4102] = b"second"
    print("after resize", len(m), m[:5], m[4096:4102])
    m.flush()
    m.resize(100)
    print("shrunk", len(m), m[:5])
    m.close()
print("file", open("grow", "rb").read()[:5], open("grow", "rb").read()[4096:4102])
tail = b"  DEARdear  "
with open("sparse", "w+b") as f:
    f.seek((4 << 30) - 6)
    f.write(tail)
    f.flush()
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        print("4 GiB sparse, its tail:", m[(4 << 30) - 6:(4 << 30) + 6])
os.unlink("sparse")
'
"##;

/// open with O_CREAT while another thread unlinks the name over and over (Python's logging
/// WatchedFileHandler race test): every open succeeds, as on the kernel, which retries its
/// lookup. Prints the same on a kernel directory.
#[allow(dead_code)]
pub const CREATE_RACE_SCRIPT: &str = r##"cd "$D"
python3 -c '
import os, threading
stop = False
def remover():
    while not stop:
        try:
            os.unlink("log")
        except FileNotFoundError:
            pass
t = threading.Thread(target=remover)
t.start()
errors = 0
try:
    for i in range(3000):
        try:
            with open("log", "a") as f:
                f.write("x")
        except OSError as e:
            errors += 1
finally:
    stop = True
    t.join()
print("opens with O_CREAT that failed while the name came and went:", errors)
'
"##;

/// Unix-domain datagram sockets bound to paths on the file system: connect and send, sendto by
/// path, and getsockname/getpeername giving the paths back as the program wrote them (Python's
/// socketserver keeps getsockname() as the server's address). Prints the same on a kernel
/// directory.
#[allow(dead_code)]
pub const DATAGRAM_SCRIPT: &str = r##"cd "$D"
python3 -c '
import socket, os
srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
srv.bind("sock")
c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    c.connect("sock")
    c.send(b"hello")
    print("received", srv.recv(10))
except OSError as e:
    print("connect:", e)
c2 = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    c2.sendto(b"direct", "sock")
    print("received", srv.recv(10))
except OSError as e:
    print("sendto:", e)
'
python3 -c '
import socket, os
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("named")
print("getsockname:", s.getsockname().replace(os.getcwd(), ""))
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("stream")
srv.listen()
c.connect("stream")
print("getpeername:", c.getpeername().replace(os.getcwd(), ""))
'
"##;

/// What the kernel answers that a shim must answer too (issue 37): writes, fallocate and
/// truncate by another user clear set-id bits (set-group-id also without group-execute for
/// someone outside the group), so does an access ACL set by an owner outside the file's group;
/// fallocated blocks count in st_blocks; rewinddir lists names added since opendir; chown
/// naming the present owner is still the owner's to do; a
/// relative path is limited by its own length, not the working directory's; a bad path pointer
/// is EFAULT, never a crash; a child that forks and drops its privileges keeps the file system
/// and is checked with its new credentials. Runs as root; `nobody` must reach `$D`.
#[allow(dead_code)]
pub const KERNEL_ANSWERS_SCRIPT: &str = r#"set -e
chmod 755 "$D/.."
cd "$D"
chmod 777 .
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
for m in 4777 2777 6777 2666 2676 4755; do
  echo x > f$m; chmod $m f$m
  as_nobody sh -c "echo y >> f$m" 2>/dev/null || true
  printf '%s write %s' $m $(stat -c %a f$m)
  chmod $m f$m; as_nobody fallocate -l 8192 f$m 2>/dev/null || true
  printf ' fallocate %s' $(stat -c %a f$m)
  chmod $m f$m; as_nobody fallocate -p -o 0 -l 100 f$m 2>/dev/null || true
  printf ' punch %s' $(stat -c %a f$m)
  chmod $m f$m; as_nobody truncate -s 10 f$m 2>/dev/null || true
  printf ' truncate %s' $(stat -c %a f$m)
  chmod $m f$m; echo z >> f$m
  printf ' root %s\n' $(stat -c %a f$m)
done
echo x > acl; chown 65534:0 acl; chmod 2666 acl
as_nobody setfacl -m u:1234:rw acl
printf 'acl by the owner outside the group %s\n' $(stat -c %a acl)
fallocate -o 4095 -l 2 pre; printf 'fallocated %s %s' $(stat -c '%s %b' pre)
printf 'xy' | dd of=pre bs=1 seek=4095 conv=notrunc 2>/dev/null
printf ' written %s %s\n' $(stat -c '%s %b' pre)
python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.opendir.restype = ctypes.c_void_p
libc.readdir.restype = ctypes.c_void_p
libc.readdir.argtypes = libc.rewinddir.argtypes = libc.closedir.argtypes = [ctypes.c_void_p]
os.mkdir('listed')
for n in ('a', 'b'):
    open('listed/' + n, 'w').close()
def names(dp):
    out = []
    while True:
        e = libc.readdir(dp)
        if not e:
            return sorted(n for n in out if n not in ('.', '..'))
        out.append(ctypes.string_at(e + 19).decode())
dp = libc.opendir(b'listed')
print('listed', names(dp))
for n in ('c', 'd', 'e'):
    open('listed/' + n, 'w').close()
libc.rewinddir(dp)
print('after rewinddir', names(dp))
libc.closedir(dp)
"
echo data > owned
as_nobody sh -c 'chown 0:0 owned 2>/dev/null && echo chown allowed || echo chown refused'
as_nobody sh -c 'chgrp 0 owned 2>/dev/null && echo chgrp allowed || echo chgrp refused'
python3 -c "
import os
os.mkdir('deep'); os.chdir('deep')
for _ in range(24):
    os.mkdir('d' * 200); os.chdir('d' * 200)
print('deep', len(os.getcwd()) > 4096)
open('f', 'w').close(); os.mkdir('s'); os.link('f', 'g'); os.rename('g', 'h')
os.chmod('f', 0o600); os.symlink('f', 'l'); os.truncate('f', 5); os.unlink('h'); os.rmdir('s')
print(sorted(os.listdir('.')), os.stat('f').st_size, oct(os.stat('f').st_mode))
"
python3 -c "
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
bad = ctypes.c_void_p(0xdeadc0de)
for name, call in (
    ('open', lambda: libc.open(bad, 0)),
    ('chmod', lambda: libc.chmod(bad, 0o644)),
    ('mkdir', lambda: libc.mkdir(bad, 0o755)),
    ('unlink', lambda: libc.unlink(bad)),
    ('rmdir', lambda: libc.rmdir(bad)),
    ('truncate', lambda: libc.truncate(bad, ctypes.c_long(0))),
    ('rename from', lambda: libc.rename(bad, b'x')),
    ('rename to', lambda: libc.rename(b'owned', bad)),
    ('link to', lambda: libc.link(b'owned', bad)),
    ('link missing', lambda: libc.link(b'missing', bad)),
    ('symlink', lambda: libc.symlink(bad, b'y')),
):
    ctypes.set_errno(0)
    r = call()
    print(name, r, errno.errorcode.get(ctypes.get_errno()))
pid = os.fork()
if pid == 0:
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
    print('child stat', oct(os.stat('owned').st_mode), os.stat('f4755').st_size)
    for flags in (os.O_RDONLY, os.O_WRONLY):
        try:
            os.close(os.open('owned', flags)); print('child open', flags, 'ok')
        except OSError as e:
            print('child open', flags, errno.errorcode[e.errno])
    os._exit(0)
os.waitpid(pid, 0)
"
"#;

/// Programs that bring their own allocator (issue 38): jemalloc and tcmalloc preloaded beside
/// the shim (their initialization calls readlink and open with their lock held), and Redis,
/// which Debian links with jemalloc: an append-only file synced at every write, the data read
/// back by a second server. What is not installed is skipped (the same on both sides).
#[allow(dead_code)]
pub const ALLOCATORS_SCRIPT: &str = r#"set -e
cd /
for lib in /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4; do
  [ -e "$lib" ] || continue
  LD_PRELOAD="$LD_PRELOAD:$lib" timeout 20 python3 -c "
import os, sys
d = os.environ['D']
with open(d + '/a', 'w') as f:
    f.write('x' * 100000)
os.rename(d + '/a', d + '/b')
print(os.path.basename(sys.argv[1]).split('.')[0], os.path.getsize(d + '/b'), sorted(os.listdir(d)))
os.unlink(d + '/b')
" "$lib"
done
command -v redis-server >/dev/null || exit 0
serve() {
  timeout 30 redis-server --dir "$D" --port "$PORT" --appendonly yes --appendfsync always \
    --save '' --daemonize no >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis did not start"
}
serve
redis-cli -p "$PORT" set k v
redis-cli -p "$PORT" incr n
redis-cli -p "$PORT" incr n
redis-cli -p "$PORT" rpush l a b c
redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
wait $pid || true
serve
redis-cli -p "$PORT" get k
redis-cli -p "$PORT" get n
redis-cli -p "$PORT" lrange l 0 -1
redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
wait $pid || true
"#;

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
