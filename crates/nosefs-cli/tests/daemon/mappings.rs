//! Shared mappings of clients: one memory between processes, stores durable at msync and seen
//! through the FUSE mount, read-only and mprotected mappings following writes, LMDB, mremap.

use super::*;

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
