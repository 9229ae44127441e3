//! Scripts of the calls on files and names the end-to-end tests run on noseFS and on a kernel
//! directory: calls by number, limits, holes, listings, extended attributes, removed
//! directories, unnamed files, ranges, FIEMAP.

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
