#!/usr/bin/env bash
# The test command: installs what is missing, builds, checks formatting and lints, runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
./scripts/install-deps.sh

if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
  echo "test: /dev/shm must exist and be writable (the tests keep their images there)" >&2
  exit 1
fi

echo "== cargo build"
cargo build --workspace --all-targets --locked
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== crash-consistency checker (release build: every operation, every pair of operations)"
cargo test --release --locked -p nosefs-crash -- --nocapture
echo "== large image: 10^6 names created, unmounted, remounted, listed, read, fsck'd (release build)"
cargo run --release --locked -p nosefs-bench --example mount_scale -- 1000000 4
echo "== external suites against the FUSE mount: pjdfstest, fsx"
./scripts/fuse-suites.sh
echo "== external suites through the preload shim: pjdfstest, fsx"
./scripts/preload-suites.sh
echo "== CPython's file-system regression tests through the preload shim, both modes"
./scripts/python-suites.sh
echo "== random-operation stress on every frontend (FUSE, daemon clients, embedded), fsck after each"
./scripts/stress.sh
