#!/usr/bin/env bash
# The main job: build noseFS and run the benchmark suite, the native library side by side with a
# private tmpfs and an ext4 ramdisk on the micro workloads (dirops, fileops, mmap), and write the
# report (table, JSON, plots) under results/. Needs root for the scratch mounts.
#
#   NOSEFS_BENCH_ARGS="--quick"   extra arguments for `nosefs bench` (e.g. --quick, --target ...)
#   NOSEFS_RESULTS=DIR            where the report goes (default results/YYYY-MM-DD-HHMMSS)
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
# shellcheck disable=SC2086
target/release/nosefs bench ${NOSEFS_BENCH_ARGS:-} --json "$out/results.json" --out "$out" \
  | tee "$out/table.md"
echo
echo "main job: the report is in $out/report.md (plots and results.json beside it)"
