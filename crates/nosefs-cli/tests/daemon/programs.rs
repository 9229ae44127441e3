//! Programs and their calls answered as the kernel answers them: shells, make, git, tar,
//! sqlite3, python, spawned children, FIFOs, sockets, holes, listings, extended attributes,
//! programs and shared objects stored on noseFS; most scripts run on a kernel directory too.

use super::*;

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
fn what_something_is_mounted_on_is_busy_until_the_unmount() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // The first rmdir reads the mount table; the mounts after it and the unmounts after those
    // must be seen by the next call (the daemon keeps the table between calls). A directory and
    // a file mounted on can be neither removed nor renamed, nor renamed over, as the kernel
    // answers; a rename through the daemon would also have detached the kernel's mount.
    let out = same_as_kernel(
        &m,
        "cd $D && mkdir a b c && touch f g && rmdir a && echo removed a
         mount -t tmpfs none b && mount --bind g f || exit 1
         rmdir b 2>/dev/null || echo b busy
         mv b b2 2>/dev/null || echo b not renamed
         mv -T c b 2>/dev/null || echo c not renamed over b
         rm f 2>/dev/null || echo f busy
         mv f f2 2>/dev/null || echo f not renamed
         mount | grep -c \" $D/[bf] \"
         umount b f && rmdir b && mv f f2 && rm f2 && echo removed b and f
         ls",
    );
    assert_eq!(
        out,
        "removed a\nb busy\nb not renamed\nc not renamed over b\nf busy\nf not renamed\n2\n\
         removed b and f\nc\ng\n"
    );
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
fn calls_by_number_and_the_generic_ioctls_answer_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::RAW_CALLS_SCRIPT);
    assert!(
        out.contains("copy_file_range overlapping: -1 EINVAL\n"),
        "{out}"
    );
    assert!(out.contains("getdents64: 5 names\n"), "{out}");
    m.unmount_and_fsck();
}

#[test]
fn file_size_limits_readahead_io_uring_and_clone_vm_children_as_on_the_kernel() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::LIMITS_SCRIPT);
    assert!(out.contains("write crossing it: 2000\n"), "{out}");
    assert!(out.contains("before after\n"), "{out}");
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
fn posix_asynchronous_io_reads_and_writes_nosefs_files() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::aio::POSIX_SCRIPT);
    assert_eq!(out, common::aio::POSIX_OUTPUT);
    m.unmount_and_fsck();
}

#[test]
fn linux_asynchronous_io_is_served_for_nosefs_files() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let out = same_as_kernel(&m, common::aio::LINUX_SCRIPT);
    assert_eq!(out, common::aio::LINUX_OUTPUT);
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
