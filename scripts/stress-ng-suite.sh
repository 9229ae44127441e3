#!/usr/bin/env bash
# stress-ng's file-system and I/O stressors, and those of its memory ones that map files (an
# outside suite: each hammers one family of calls from several processes, `--verify` checks what
# it reads back) against the FUSE mount and
# through the shim as daemon clients, with fsck after each frontend. Each must succeed, unless it
# fails on tmpfs too (tried after a failure: then the kernel's answer is what the stressor does
# not expect, as stress-ng 0.15's io-uring stressor expects a statx answer 6.x kernels do not
# give) or docs/testing.md names a difference noseFS keeps on purpose.
#
# Embedded mode is not run: stress-ng forks its workers, and an image serves one process at a
# time there.
#
# NOSEFS_STRESS_NG_SECONDS: seconds per stressor (default 1; CI's budget). NOSEFS_STRESS_NG:
# the stressors, space-separated (default: all of the list below).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'stress-ng-suite: %s\n' "$*" >&2; }
# shellcheck source=scripts/fsck-clean.sh
source scripts/fsck-clean.sh

if [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then
  log "skipped: needs /dev/fuse and root"
  exit 0
fi
command -v stress-ng >/dev/null || { log "stress-ng is missing (scripts/install-deps.sh installs it)"; exit 1; }

all="access chattr chdir chmod chown copy-file dentry dir dirdeep dirmany dup fallocate fcntl
fiemap file-ioctl filename flock fpunch fsize fstat getdent handle hdd inode-flags io iomix lease
link locka lockf lockofd mknod open rename symlink sync-file touch utime xattr aio aiol io-uring
readahead revio seek mmap msync madvise fault sendfile splice fifo mmapfork"
stressors="${NOSEFS_STRESS_NG:-$all}"
seconds="${NOSEFS_STRESS_NG_SECONDS:-1}"
# Differences kept on purpose, by frontend (docs/testing.md, "stress-ng"): as daemon clients an
# OFD lock through a description that never locked is ENOLCK while the process holds record
# locks on the file (taking it would drop them: docs/shim.md).
known_client="fcntl"

cargo build --release --locked --quiet -p nosefs-cli -p nosefs-preload
nosefs="$PWD/target/release/nosefs"
work="$(mktemp -d /dev/shm/nosefs-stress-ng.XXXXXX)"
image="$work/fs.img"
mnt="$work/mnt"
plain="$work/plain"
mkdir "$mnt" "$plain"
cleanup() {
  cd /
  mountpoint -q "$mnt" && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT

# run DIR OUT [PREFIX...]: one stressor ($s) in DIR/s, two instances; its output in OUT.
run() {
  local dir="$1" out="$2"
  shift 2
  rm -rf "$dir/s" && mkdir -p "$dir/s"
  timeout 120 "$@" stress-ng "--$s" 2 --timeout "$seconds" --temp-path "$dir/s" --verify \
    >"$out" 2>&1
}

# check LABEL DIR KNOWN-LIST PREFIX...: every stressor in DIR; prints FAILED lines, returns 1 on
# any failure not documented or not the kernel's own.
check() {
  local label="$1" dir="$2" known="$3" out="$work/$1.out" bad=0
  shift 3
  mkdir -p "$dir"
  for s in $stressors; do
    if run "$dir" "$out" "$@"; then
      continue
    fi
    if [[ " $known " == *" $s "* ]]; then
      log "$label: $s fails as documented"
      continue
    fi
    if ! run "$plain/$label" "$out.tmpfs"; then
      log "$label: $s fails on tmpfs too: not counted"
      continue
    fi
    log "$label: $s FAILED"
    grep -E 'fail|error' "$out" | head -n 5 >&2 || tail -n 5 "$out" >&2
    bad=1
  done
  return "$bad"
}

# Room for both frontends' largest stressors at once (iomix reserves 1 GiB, hdd writes 1 GiB); the
# image file holds only what is written.
"$nosefs" mkfs --size 6G "$image" >/dev/null
"$nosefs" mount -o allow_other "$image" "$mnt"
# Both frontends at once, on one image (each in a directory of its own): half the time, and the
# FUSE path and the daemon's clients change the image side by side.
log "$(echo "$stressors" | wc -w) stressors, ${seconds}s each, on the FUSE mount and as daemon clients at once"
# The FUSE side's verdict goes through a file, not `wait PID`: by the time the daemon side ends,
# thousands of processes later, the background job's pid may have been reused, and bash then
# forgets its status ("pid ... is not a child of this shell": a CI run failed so).
(if check FUSE "$mnt/fuse" ""; then echo 0; else echo 1; fi >"$work/fuse.verdict") &
failed=0
check "daemon-clients" "$mnt/clients" "$known_client" "$nosefs" run --at "$mnt" -- || failed=1
wait
[ "$(cat "$work/fuse.verdict" 2>/dev/null)" = 0 ] || failed=1
umount "$mnt"
fsck_clean "$image" "after the stressors"
[ "$failed" = 0 ] || { log "failed"; exit 1; }
log "every stressor passed"
