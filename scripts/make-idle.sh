#!/usr/bin/env bash
# make -j2 of 2,000 `cp` jobs (the tools workload's tree: 40 directories of 50 files of 1-8 KB
# and a Makefile copying each) as daemon clients of a fresh `nosefs mount`, with the make's
# time, the daemon's CPU time and the machine's busy and idle CPU time from /proc/stat around
# it. docs/benchmarks.md ("Idle CPUs beside queued work: a make job's stalls"). Needs root
# and /dev/fuse.
#   scripts/make-idle.sh [BIN_DIR]          (default: target/release; `tmpfs` runs it on tmpfs)
# Alternated between two builds: scripts/ab.py A B --rounds 8 --pick 'make ([\d.]+) s' -- sh -c 'scripts/make-idle.sh {bin}'
set -euo pipefail
bin="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release}"
work="$(mktemp -d /tmp/make-idle.XXXXXX)"
image="/dev/shm/$(basename "$work").img"
cleanup() {
  mountpoint -q "$work/m" 2>/dev/null && umount "$work/m"
  rm -rf "$work" "$image"
}
trap cleanup EXIT
mkdir -p "$work/src" "$work/m"
python3 - "$work/src" <<'PY'
import os, sys
root = sys.argv[1]; x = 0x9e3779b9; m = (1 << 64) - 1
for d in range(40):
    os.makedirs(f"{root}/d{d:02d}")
    for f in range(50):
        x ^= (x << 13) & m; x ^= x >> 7; x ^= (x << 17) & m
        n = 1024 + x % 7168
        open(f"{root}/d{d:02d}/f{f:02d}.c", "w").write("".join(chr(97 + (x + i) % 26) for i in range(n)))
open(f"{root}/Makefile", "w").write("SRC := $(wildcard d*/*.c)\nall: $(SRC:.c=.out)\n%.out: %.c\n\tcp $< $@\n")
PY
tar -cf "$work/src.tar" -C "$work/src" .
cpu() { read -r _ u n s i w x y z _ < /proc/stat; echo "$((u + n + s + x + y + z)) $((i + w))"; }
if [ "$bin" = tmpfs ]; then
  tree="$(mktemp -d /dev/shm/make-idle-tree.XXXXXX)"; daemon=""; run=()
  trap 'cleanup; rm -rf "$tree"' EXIT
else
  "$bin/nosefs" mkfs "$image" --size 2G >/dev/null
  "$bin/nosefs" mount "$image" "$work/m"
  tree="$work/m/t"; mkdir "$tree"
  daemon="$(pgrep -f "nosefs mount .*$image" | head -1 || true)"; run=("$bin/nosefs" run --at "$work/m" --)
fi
tar -xf "$work/src.tar" -C "$tree"
ticks() { [ -n "$daemon" ] && awk '{print $14 + $15}' "/proc/$daemon/stat" || echo 0; }
read -r busy0 idle0 < <(cpu); d0="$(ticks)"; start="$(date +%s%N)"
"${run[@]}" make -s -j2 -C "$tree"
end="$(date +%s%N)"; read -r busy1 idle1 < <(cpu); d1="$(ticks)"
hz="$(getconf CLK_TCK)"
echo "make $(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }') s" \
  "daemon cpu $(( (d1 - d0) * 1000 / hz )) ms busy $(( (busy1 - busy0) * 1000 / hz )) ms idle $(( (idle1 - idle0) * 1000 / hz )) ms"
