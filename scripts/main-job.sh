#!/usr/bin/env bash
# The main job: build noseFS and run the benchmark suite, the native library side by side with a
# private tmpfs and an ext4 ramdisk on the micro workloads (dirops, fileops, mmap, and fragment:
# 1 MiB reads of a file fresh and after random 1 KiB overwrites fragmented it), then the
# application workloads (SQLite, Redis, YCSB on LMDB and LevelDB, RocksDB db_bench, pgbench on
# PostgreSQL, sysbench on MariaDB, tar/git/make/rsync:
# the programs themselves), with what one call costs (`calls`: fstat, stat, open+close), on tmpfs,
# the ext4 ramdisk and noseFS through the shim (daemon clients and embedded), and write the reports (table, JSON, plots) under results/. Needs root for the
# scratch mounts.
#
#   NOSEFS_BENCH_ARGS="--quick"   extra arguments for `nosefs bench` (e.g. --quick, --target ...)
#   NOSEFS_RESULTS=DIR            where the report goes (default results/YYYY-MM-DD-HHMMSS)
#   NOSEFS_STANDING=0             leave docs/benchmarks.md alone (by default its "Where noseFS
#                                 stands" section is rewritten from this run: scripts/standing.py)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
./scripts/install-deps.sh --bench

cargo build --release --locked -p nosefs-cli
out="${NOSEFS_RESULTS:-results/$(date +%Y-%m-%d-%H%M%S)}"
mkdir -p "$out"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || commit="$commit with uncommitted changes"
echo "$commit" >"$out/commit"
# shellcheck disable=SC2086
target/release/nosefs bench ${NOSEFS_BENCH_ARGS:-} \
  --workload dirops --workload fileops --workload mmap --workload fragment \
  --json "$out/results.json" --out "$out" | tee "$out/table.md"
mkdir -p "$out/apps"
# shellcheck disable=SC2086
target/release/nosefs bench ${NOSEFS_BENCH_ARGS:-} --threads 1 \
  --target tmpfs --target ramdisk:ext4 --target nosefs-client --target nosefs-preload \
  --workload calls --workload sqlite --workload redis --workload kv --workload rocksdb --workload oltp --workload tools \
  --json "$out/apps/results.json" --out "$out/apps" | tee "$out/apps/table.md"
if [ "${NOSEFS_STANDING:-1}" != 0 ]; then
  python3 scripts/standing.py "$out" --doc docs/benchmarks.md
fi
echo
echo "main job: the reports are in $out/report.md and $out/apps/report.md (plots and results.json beside them)"
