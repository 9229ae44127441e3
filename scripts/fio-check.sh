#!/usr/bin/env bash
# Validates the benchmark harness against fio: 4 KiB sequential psync writes over an 80 MiB file
# on tmpfs, measured by fio on a private tmpfs and by `nosefs bench` (fileops, op `write`) on its
# own private tmpfs, in the same session. The two should agree within 15%. Needs root and fio.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v fio >/dev/null 2>&1; then
  echo "fio-check: fio is not installed (./scripts/install-deps.sh --bench installs it)" >&2
  exit 2
fi
cargo build --release --locked -q -p nosefs-cli
nosefs=target/release/nosefs

mnt="$(mktemp -d /tmp/nosefs-fio-check.XXXXXX)"
cleanup() { umount "$mnt" 2>/dev/null || true; rmdir "$mnt"; }
trap cleanup EXIT
mount -t tmpfs -o size=1G nosefs-fio "$mnt"

rounds="${FIO_CHECK_ROUNDS:-3}"
fio_iops=()
bench_iops=()
for round in $(seq 1 "$rounds"); do
  # Terse format v3: field 49 is the write IOPS.
  iops=$(fio --name=psync4k --directory="$mnt" --rw=write --bs=4k --size=80m --ioengine=psync \
    --numjobs=1 --loops=5 --minimal | awk -F';' '{print $49}')
  fio_iops+=("$iops")
  rm -f "$mnt"/psync4k*
  # The table row: | tmpfs | write | - | 1 | 4K | OPS/S | ...
  ops=$("$nosefs" bench --target tmpfs --workload fileops --threads 1 --runs 1 --writes 20000 \
    2>/dev/null | awk -F'|' '$2 ~ /tmpfs/ && $3 ~ /^ write / {gsub(/ /, "", $7); print $7}')
  bench_iops+=("$ops")
  echo "round $round: fio ${iops} IOPS, nosefs bench ${ops} ops/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
fio_median=$(median "${fio_iops[@]}")
bench_median=$(median "${bench_iops[@]}")
awk -v f="$fio_median" -v b="$bench_median" 'BEGIN {
  r = b / f;
  printf "median: fio %.0f IOPS, nosefs bench %.0f ops/s, ratio %.3f\n", f, b, r;
  if (r < 0.85 || r > 1.15) { print "fio-check: FAIL (outside 15%)"; exit 1 }
  print "fio-check: agree within 15%";
}'
