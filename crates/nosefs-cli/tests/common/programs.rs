//! Scripts of programs the end-to-end tests start on noseFS and on a kernel directory: spawned
//! children, LMDB, exec, posix_spawn's directory actions, dlopen, PATH searches, allocators.

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
