#!/usr/bin/env bash
# External test suites no one here wrote, through the preload shim (`nosefs run`, embedded mode):
# pjdfstest (POSIX behaviour of every call, as root and as other users: the shim makes the
# permission checks the kernel would) and fsx (random reads, writes, truncates, close/open and
# fsyncs, every read checked). Then the image must be fsck-clean.
#
# Expected failures (in scripts/suites/pjdfstest-preload.toml) and fsx's disabled operations
# (scripts/suites/fsx-preload.toml) carry their reasons. NOSEFS_FSX_OPS sets fsx's operation
# count (default 100000). Needs root (pjdfstest switches users); installs both tools with cargo
# into target/tools on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'preload-suites: %s\n' "$*" >&2; }
# shellcheck source=scripts/fsck-clean.sh
source scripts/fsck-clean.sh

if [ "$(id -u)" != 0 ]; then
  log "skipped: pjdfstest needs root"
  exit 0
fi

# shellcheck source=scripts/suite-tools.sh
. ./scripts/suite-tools.sh

cargo build --release --locked --quiet -p nosefs-cli -p nosefs-preload
nosefs="$PWD/target/release/nosefs"
repo="$PWD"
work="$(mktemp -d /dev/shm/nosefs-preload-suites.XXXXXX)"
# pjdfstest acts as other users too, who must be able to reach the prefix.
chmod 755 "$work"
trap 'cd /; rm -rf "$work"' EXIT

suite() { # name, then the command to run under the shim on a fresh image at $work/<name>
  local name="$1"
  shift
  "$nosefs" mkfs --size 1G "$work/$name.img" >/dev/null
  if ! (cd "$work" && "$nosefs" run --image "$work/$name.img" --at "$work/$name" -- "$@" \
    >"$work/$name.log" 2>&1); then
    grep -A3 FAILED "$work/$name.log" >&2 || true
    tail -n 30 "$work/$name.log" >&2
    log "$name failed"
    exit 1
  fi
  fsck_clean "$work/$name.img" "after $name"
}

log "pjdfstest under the shim (expected failures: scripts/suites/pjdfstest-preload.toml)"
suite pjdfstest pjdfstest -c "$repo/scripts/suites/pjdfstest-preload.toml" -p "$work/pjdfstest"
grep Summary "$work/pjdfstest.log" >&2

ops="${NOSEFS_FSX_OPS:-100000}"
log "fsx under the shim: $ops operations, seed 1, mapped reads and writes included (scripts/suites/fsx-preload.toml)"
suite fsx fsx -N "$ops" -S 1 -f "$repo/scripts/suites/fsx-preload.toml" "$work/fsx/fsx.file"
tail -n 1 "$work/fsx.log" >&2
log "fsck after both suites: clean"

# Daemon mode: the same suites from shim clients of a `nosefs mount` daemon (issue 21).
if [ ! -e /dev/fuse ]; then
  log "daemon mode skipped: needs /dev/fuse"
  exit 0
fi
dimage="$work/daemon.img"
dmnt="$work/d" # short: pjdfstest binds Unix sockets by absolute path (108 bytes at most)
mkdir "$dmnt"
"$nosefs" mkfs --size 1G "$dimage" >/dev/null
"$nosefs" mount -o allow_other "$dimage" "$dmnt"
trap 'cd /; mountpoint -q "$dmnt" && umount "$dmnt"; rm -rf "$work"' EXIT
client() { # name, then the command to run as a client of the daemon, in $dmnt/<name>
  local name="$1"
  shift
  mkdir -m 777 "$dmnt/$name"
  if ! (cd "$dmnt/$name" && "$nosefs" run --at "$dmnt" -- "$@" >"$work/daemon-$name.log" 2>&1); then
    grep -A3 FAILED "$work/daemon-$name.log" >&2 || true
    tail -n 30 "$work/daemon-$name.log" >&2
    log "$name as a daemon client failed"
    exit 1
  fi
}
log "pjdfstest as a daemon client (expected failures: scripts/suites/pjdfstest-daemon.toml)"
client pj pjdfstest -c "$repo/scripts/suites/pjdfstest-daemon.toml" -p "$dmnt/pj"
grep Summary "$work/daemon-pj.log" >&2
log "fsx as a daemon client: $ops operations, seed 1, mapped reads and writes over the daemon's shadow of the file and, past 32 mappings, the FUSE mount (scripts/suites/fsx-daemon.toml)"
client fsx fsx -N "$ops" -S 1 -f "$repo/scripts/suites/fsx-daemon.toml" "$dmnt/fsx/fsx.file"
tail -n 1 "$work/daemon-fsx.log" >&2
# pjdfstest's etxtbsy tests run `sleep 10` from the mount; where the test fails (an expected
# failure here) it never kills it, and the mount stays busy until it ends: retry up to 30 s.
for _ in $(seq 300); do
  umount "$dmnt" 2>/dev/null && break
  sleep 0.1
done
mountpoint -q "$dmnt" && umount "$dmnt"
fsck_clean "$dimage" "after the daemon-mode suites"
