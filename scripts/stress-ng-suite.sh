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

# run DIR [PREFIX...]: one stressor ($s) in DIR/s, two instances; its output in $work/out.
run() {
  local dir="$1"
  shift
  rm -rf "$dir/s" && mkdir "$dir/s"
  timeout 120 "$@" stress-ng "--$s" 2 --timeout "$seconds" --temp-path "$dir/s" --verify \
    >"$work/out" 2>&1
}

failed=0
check() { # LABEL KNOWN-LIST PREFIX...
  local label="$1" known="$2"
  shift 2
  for s in $stressors; do
    if run "$mnt" "$@"; then
      continue
    fi
    if [[ " $known " == *" $s "* ]]; then
      log "$label: $s fails as documented"
      continue
    fi
    if ! run "$plain"; then
      log "$label: $s fails on tmpfs too: not counted"
      continue
    fi
    log "$label: $s FAILED"
    grep -E 'fail|error' "$work/out" | head -n 5 >&2 || tail -n 5 "$work/out" >&2
    failed=1
  done
}

"$nosefs" mkfs --size 2G "$image" >/dev/null
"$nosefs" mount -o allow_other "$image" "$mnt"
log "the FUSE mount: $(echo "$stressors" | wc -w) stressors, ${seconds}s each"
check "FUSE" ""
log "daemon clients (nosefs run --at)"
check "daemon clients" "$known_client" "$nosefs" run --at "$mnt" --
umount "$mnt"
fsck_clean "$image" "after the stressors"
[ "$failed" = 0 ] || { log "failed"; exit 1; }
log "every stressor passed"
