#!/usr/bin/env bash
# The test command: installs what is missing, builds, checks formatting and lints, runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi

# Each section's start and the time since the test command began: CI's budget is ~30 minutes
# on two cores, and this is where its log says what took it.
started=$SECONDS
section() { echo "== $1 (at $((SECONDS - started)) s)"; }

section "install what is missing"
./scripts/install-deps.sh

if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
  echo "test: /dev/shm must exist and be writable (the tests keep their images there)" >&2
  exit 1
fi

section "cargo build"
cargo build --workspace --all-targets --locked
section "cargo fmt --check"
cargo fmt --all -- --check
section "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
section "cargo test"
cargo test --workspace --locked
# Beyond their fixed seeds, the crash checker and the stress take seeds that change every day
# (the crash checker's seeds 0-3 never found what seed 335 did): CI explores new sequences in the
# same time. Each is printed; a failure names the seed that reproduces it.
day=$(( $(date +%s) / 86400 ))
export NOSEFS_CRASH_SEEDS="${NOSEFS_CRASH_SEEDS-$((1000 + 2 * (day % 100000))) $((1001 + 2 * (day % 100000)))}"
export NOSEFS_STRESS_SEEDS="${NOSEFS_STRESS_SEEDS-1 $((1000 + day % 100000))}"
echo "test: crash checker seeds 0-3 and $NOSEFS_CRASH_SEEDS; stress seeds $NOSEFS_STRESS_SEEDS"
section "crash-consistency checker (release build: every operation, every pair of operations)"
cargo test --release --locked -p nosefs-crash -- --nocapture
section "large image: 10^6 names created, unmounted, remounted, listed, read, fsck'd (release build)"
cargo run --release --locked -p nosefs-bench --example mount_scale -- 1000000 4
section "external suites against the FUSE mount: pjdfstest, fsx"
./scripts/fuse-suites.sh
section "external suites through the preload shim: pjdfstest, fsx"
./scripts/preload-suites.sh
section "CPython's file-system regression tests through the preload shim, both modes"
./scripts/python-suites.sh
section "stress-ng's file-system and I/O stressors: FUSE mount and daemon clients, fsck after"
./scripts/stress-ng-suite.sh
section "random-operation stress on every frontend (FUSE, daemon clients, embedded), fsck after each"
./scripts/stress.sh
echo "== done in $((SECONDS - started)) s"
