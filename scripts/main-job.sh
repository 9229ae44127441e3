#!/usr/bin/env bash
# The main job, until the benchmark suite lands: build noseFS, format an image in /dev/shm, check
# it, and print what it holds. NOSEFS_IMAGE and NOSEFS_SIZE override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
./scripts/install-deps.sh

image="${NOSEFS_IMAGE:-/dev/shm/nosefs.img}"
size="${NOSEFS_SIZE:-1G}"
cargo build --release --locked -p nosefs-cli
nosefs=target/release/nosefs
"$nosefs" mkfs "$image" --size "$size"
"$nosefs" fsck "$image"
"$nosefs" info "$image"
