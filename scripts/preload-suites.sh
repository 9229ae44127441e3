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
  if ! "$nosefs" fsck "$work/$name.img" >"$work/$name.fsck" 2>&1; then
    cat "$work/$name.fsck" >&2
    log "fsck after $name found problems"
    exit 1
  fi
}

log "pjdfstest under the shim (expected failures: scripts/suites/pjdfstest-preload.toml)"
suite pjdfstest pjdfstest -c "$repo/scripts/suites/pjdfstest-preload.toml" -p "$work/pjdfstest"
grep Summary "$work/pjdfstest.log" >&2

ops="${NOSEFS_FSX_OPS:-100000}"
log "fsx under the shim: $ops operations, seed 1, mapped reads and writes included (scripts/suites/fsx-preload.toml)"
suite fsx fsx -N "$ops" -S 1 -f "$repo/scripts/suites/fsx-preload.toml" "$work/fsx/fsx.file"
tail -n 1 "$work/fsx.log" >&2
log "fsck after both suites: clean"
