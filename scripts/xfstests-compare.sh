#!/usr/bin/env bash
# By hand, not in CI (xfstests is not packaged for Debian, and CI has no network but the package
# registries): xfstests' fsstress and a set of its own test programs (`src/`), built from a
# checkout of xfstests, run on a private tmpfs and on every frontend of noseFS (the FUSE mount,
# daemon clients, the embedded shim), their answers compared with tmpfs's. fsstress with `-v`
# prints every call's answer; the logs are compared without inode numbers, FIEMAP (tmpfs has
# none) and FS_IOC_GETFLAGS / FSSETXATTR (ENOTTY on noseFS: no inode flags). Each image must be
# fsck-clean afterwards. This is how the eighteenth session of 2026-11-28 found calls made by
# number through syscall() landing outside the image (docs/compatibility.md has the results).
#
#   scripts/xfstests-compare.sh XFSTESTS_DIR [SEEDS] [OPS]     (defaults: "1 2 3" and 5000)
#
# Needs root, /dev/fuse, gcc, xfslibs-dev and libaio-dev (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'xfstests-compare: %s\n' "$*" >&2; }
src="${1:?usage: $0 XFSTESTS_DIR [SEEDS] [OPS]}"
seeds="${2:-1 2 3}"
ops="${3:-5000}"
[ -f "$src/ltp/fsstress.c" ] || { log "$src has no ltp/fsstress.c"; exit 2; }
if [ ! -e /usr/include/xfs/xfs.h ] || [ ! -e /usr/include/libaio.h ]; then
  apt-get install -y xfslibs-dev libaio-dev >/dev/null
fi

# shellcheck source=scripts/fsck-clean.sh
source scripts/fsck-clean.sh
cargo build --release --locked --quiet -p nosefs-cli -p nosefs-preload
nosefs="$PWD/target/release/nosefs"
work="$(mktemp -d /tmp/nosefs-xfstests.XXXXXX)"
bin="$work/bin"
mkdir -p "$bin" "$work/tmpfs" "$work/mnt" "$work/at"
cleanup() {
  umount "$work/mnt" 2>/dev/null || true
  umount "$work/tmpfs" 2>/dev/null || true
  rm -rf "$work" /dev/shm/nosefs-xfstests-*.img
}
trap cleanup EXIT

# fsstress wants autoconf's config.h; these are the answers for a Debian machine.
cat >"$work/config.h" <<'EOF'
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_STATVFS_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_IOCTL_H 1
#define HAVE_SYS_WAIT_H 1
#define HAVE_MALLOC_H 1
#define HAVE_DIRENT_H 1
#define HAVE_STDLIB_H 1
#define HAVE_UNISTD_H 1
#define HAVE_ERRNO_H 1
#define HAVE_STRING_H 1
#define HAVE_SYS_FCNTL_H 1
#define HAVE_SYS_PARAM_H 1
#define HAVE_LIBGEN_H 1
#define HAVE_ASSERT_H 1
#define HAVE_STRINGS_H 1
#define HAVE_LINUX_FIEMAP_H 1
#define HAVE_SYS_PRCTL_H 1
#define HAVE_COPY_FILE_RANGE 1
#define HAVE_RENAMEAT2 1
#define HAVE_SYS_XATTR_H 1
#define HAVE_XFS_XFS_H 1
#define HAVE_XFS_JDM_H 1
#define HAVE_GETOPT_H 1
#include <time.h>
#include <getopt.h>
EOF
cc_tool() { # name, source
  gcc -O2 -D_GNU_SOURCE -DAIO -I"$work" -I"$src/src" -I"$src/include" -o "$bin/$1" "$2" \
    -lpthread -lm -laio 2>"$work/build-$1.log" || { log "cannot build $1 (see $work/build-$1.log)"; exit 1; }
}
cc_tool fsstress "$src/ltp/fsstress.c"
programs="seek_sanity_test t_readdir_3 t_dir_offset2 truncfile t_rename_overwrite
  t_truncate_cmtime renameat2 splice-test t_mmap_fallocate mmap-rw-fault punch-alternating
  holetest multi_open_unlink fiemap-tester"
for p in $programs; do cc_tool "$p" "$src/src/$p.c"; done
log "built fsstress and: $(echo $programs)"

# The test programs' run, in directory $1: each one's exit status and first lines.
cat >"$work/programs.sh" <<EOF
#!/bin/sh
B=$bin
EOF
cat >>"$work/programs.sh" <<'EOF'
D=$1; cd "$D" || exit 1
r() { name=$1; shift; out=$(timeout 120 "$@" 2>&1); echo "== $name rc $?"; echo "$out" | grep -v "^$" | sed "s|$D|D|g" | head -6; }
mkdir -p od r3
for i in $(seq 1 200); do echo > od/f$i; done
r seek_sanity_test $B/seek_sanity_test sk
r t_dir_offset2 $B/t_dir_offset2 od
r t_readdir_3 $B/t_readdir_3 r3 300 7
r truncfile $B/truncfile -c 2000 -s 3 tf
echo a > p1; echo b > p2
r t_rename_overwrite $B/t_rename_overwrite p1 p2
r t_truncate_cmtime $B/t_truncate_cmtime tc
r renameat2_n $B/renameat2 -t -n a1 a2
r renameat2_x $B/renameat2 -t -x a1 a2
r renameat2_w $B/renameat2 -t -w a1 a2
r splice-test $B/splice-test sp
# 256 KiB: a fallocate of one byte per byte stored; through the FUSE mount each costs ~90 us
# here (the kernel writes the dirty page back before each FUSE fallocate; 256 KiB: 24 s), so
# 4 MiB ran past the two-minute timeout.
r t_mmap_fallocate $B/t_mmap_fallocate mf 256
r mmap-rw-fault $B/mmap-rw-fault mr
dd if=/dev/zero of=pa bs=4096 count=64 2>/dev/null
r punch-alternating $B/punch-alternating pa
r punch-blocks stat -c %b pa
r holetest $B/holetest -f ht 16
r multi_open_unlink $B/multi_open_unlink -f mo -n 50 -s 10
EOF
chmod +x "$work/programs.sh"

# Normalized fsstress log: without inode numbers and the calls tmpfs cannot answer alike.
normal() {
  sed -E 's/\[[0-9 ]+\]//g; s/id=[0-9]+,parent=-?[0-9]+//g; s/real ino [0-9]+//' "$1" |
    grep -v 'entry:' | grep -v 'ioctl(FIEMAP)\|getattr\|setxattr' || true
}
# Programs' log: seek_sanity_test's allocation size and magic differ by design (noseFS finds
# data at byte granularity), so only exit statuses are compared for it.
programs_normal() {
  awk '/^== seek_sanity_test/{print; skip=1; next} /^== /{skip=0} !skip' "$1" |
    grep -v 'File system magic\|Allocation size' || true
}

mount -t tmpfs none "$work/tmpfs"
differ=0
compare() { # label, expected, got
  if ! diff -q "$2" "$3" >/dev/null; then
    log "$1: differs from tmpfs:"
    diff "$2" "$3" | head -20 >&2 || true
    differ=1
  else
    log "$1: as on tmpfs"
  fi
}

fuse_img=/dev/shm/nosefs-xfstests-fuse.img
emb_img=/dev/shm/nosefs-xfstests-embedded.img
"$nosefs" mkfs --size 4G "$fuse_img" >/dev/null
"$nosefs" mkfs --size 4G "$emb_img" >/dev/null
"$nosefs" mount "$fuse_img" "$work/mnt" &
for _ in $(seq 1 100); do mountpoint -q "$work/mnt" && break; sleep 0.05; done

for seed in $seeds; do
  for place in tmpfs mnt; do rm -rf "$work/$place/s$seed"; mkdir "$work/$place/s$seed"; done
  "$bin/fsstress" -d "$work/tmpfs/s$seed" -p 1 -n "$ops" -s "$seed" -v >"$work/tmpfs.log" 2>&1
  normal "$work/tmpfs.log" >"$work/expected"
  "$bin/fsstress" -d "$work/mnt/s$seed" -p 1 -n "$ops" -s "$seed" -v >"$work/fuse.log" 2>&1
  normal "$work/fuse.log" >"$work/got"
  compare "fsstress seed $seed, FUSE mount" "$work/expected" "$work/got"
  rm -rf "$work/mnt/c$seed"; mkdir "$work/mnt/c$seed"
  "$nosefs" run --at "$work/mnt" -- "$bin/fsstress" -d "$work/mnt/c$seed" -p 1 -n "$ops" -s "$seed" -v \
    >"$work/client.log" 2>&1
  normal "$work/client.log" >"$work/got"
  compare "fsstress seed $seed, daemon clients" "$work/expected" "$work/got"
  "$nosefs" run --image "$emb_img" --at "$work/at" -- sh -c \
    "rm -rf '$work/at/e$seed' && mkdir '$work/at/e$seed' && exec '$bin/fsstress' -d '$work/at/e$seed' -p 1 -n $ops -s $seed -v" \
    >"$work/embedded.log" 2>&1
  normal "$work/embedded.log" >"$work/got"
  compare "fsstress seed $seed, embedded" "$work/expected" "$work/got"
done

mkdir "$work/tmpfs/p" "$work/mnt/p" "$work/mnt/q"
"$work/programs.sh" "$work/tmpfs/p" >"$work/p-tmpfs.log" 2>&1
programs_normal "$work/p-tmpfs.log" >"$work/expected"
"$work/programs.sh" "$work/mnt/p" >"$work/p-fuse.log" 2>&1
programs_normal "$work/p-fuse.log" >"$work/got"
compare "test programs, FUSE mount" "$work/expected" "$work/got"
"$nosefs" run --at "$work/mnt" -- "$work/programs.sh" "$work/mnt/q" >"$work/p-client.log" 2>&1
programs_normal "$work/p-client.log" >"$work/got"
compare "test programs, daemon clients (mmap-rw-fault differs: private mappings are copies)" \
  "$work/expected" "$work/got"
"$nosefs" run --image "$emb_img" --at "$work/at" -- sh -c \
  "mkdir '$work/at/p' && exec '$work/programs.sh' '$work/at/p'" >"$work/p-embedded.log" 2>&1
programs_normal "$work/p-embedded.log" >"$work/got"
compare "test programs, embedded" "$work/expected" "$work/got"

umount "$work/mnt"
for _ in $(seq 1 100); do mountpoint -q "$work/mnt" || break; sleep 0.05; done
fsck_clean "$fuse_img" "the FUSE mount's and daemon clients' image"
fsck_clean "$emb_img" "the embedded image"
exit "$differ"
