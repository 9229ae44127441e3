//! Scripts of data paths and the kernel's answers the end-to-end tests compare: splice, mremap,
//! creates racing unlinks, datagram sockets, the answers of issue 37.

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
