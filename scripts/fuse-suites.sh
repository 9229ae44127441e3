#!/usr/bin/env bash
# External test suites no one here wrote, against the FUSE mount: pjdfstest (POSIX behaviour of
# every system call, as root and as other users) and fsx (random reads, writes, mapped reads and
# writes, truncates and fsyncs, every read checked). Then the image must be fsck-clean.
#
# NOSEFS_FSX_OPS sets the fsx operation count (default 100000; the long variant: 1000000).
# Needs /dev/fuse and root; installs both tools with cargo into target/tools on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'fuse-suites: %s\n' "$*" >&2; }
# shellcheck source=scripts/fsck-clean.sh
source scripts/fsck-clean.sh

if [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then
  log "skipped: needs /dev/fuse and root"
  exit 0
fi

# shellcheck source=scripts/suite-tools.sh
. ./scripts/suite-tools.sh

cargo build --release --locked --quiet -p nosefs-cli
nosefs="$PWD/target/release/nosefs"
work="$(mktemp -d /dev/shm/nosefs-suites.XXXXXX)"
image="$work/fs.img"
mnt="$work/mnt"
mkdir "$mnt"
# pjdfstest acts as other users too, who must be able to reach the mountpoint.
chmod 755 "$work"
cleanup() {
  cd /
  mountpoint -q "$mnt" && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT

"$nosefs" mkfs --size 1G "$image" >/dev/null
"$nosefs" mount -o allow_other "$image" "$mnt"

log "pjdfstest (all tests; expected failures and skips are listed in docs/testing.md)"
repo="$PWD"
if ! (cd "$mnt" && pjdfstest -c "$repo/scripts/suites/pjdfstest.toml" -p "$mnt" >"$work/pjdfstest.log" 2>&1); then
  grep -A3 FAILED "$work/pjdfstest.log" >&2 || true
  tail -n 3 "$work/pjdfstest.log" >&2
  log "pjdfstest failed"
  exit 1
fi
grep Summary "$work/pjdfstest.log" >&2

ops="${NOSEFS_FSX_OPS:-100000}"
log "fsx: $ops operations, seed 1 (reads, writes, mapped reads and writes, truncates, fsyncs)"
if ! fsx -N "$ops" -S 1 -f "$repo/scripts/suites/fsx.toml" "$mnt/fsx.file" >"$work/fsx.log" 2>&1; then
  tail -n 30 "$work/fsx.log" >&2
  log "fsx failed"
  exit 1
fi
tail -n 1 "$work/fsx.log" >&2

umount "$mnt"
fsck_clean "$image" "after the suites"
