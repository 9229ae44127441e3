#!/usr/bin/env bash
# Installs what building and testing noseFS needs on a fresh Debian machine, and nothing that is
# already there. Safe to run repeatedly. Needs root for apt-get (CI and the dev machines are root).
# With --bench it also installs what the benchmark baselines need: the xfs, btrfs, f2fs and nilfs2
# tools for their ramdisk kinds, and fio for scripts/fio-check.sh.
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*" >&2; }

# A Rust toolchain installed by rustup may not be on PATH in a non-login shell.
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi

bench=0
[ "${1:-}" = "--bench" ] && bench=1

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

apt_packages=()
command -v cc >/dev/null 2>&1 || apt_packages+=(build-essential)
# Scratch mounts for `nosefs bench` (and its tests): mount with loop devices, mkfs.ext4.
have losetup || apt_packages+=(mount)
have mkfs.ext4 || apt_packages+=(e2fsprogs)
if [ "$bench" = 1 ]; then
  have mkfs.xfs || apt_packages+=(xfsprogs)
  have mkfs.btrfs || apt_packages+=(btrfs-progs)
  have fio || apt_packages+=(fio)
  # f2fs and nilfs2 run only where the kernel has them; their tools cost little either way.
  have mkfs.f2fs || apt_packages+=(f2fs-tools)
  have mkfs.nilfs2 || apt_packages+=(nilfs-tools)
fi
command -v git >/dev/null 2>&1 || apt_packages+=(git)
# Real programs the preload shim's tests run: sqlite3, python3, tar, git, make, binutils (nm,
# readelf).
have sqlite3 || apt_packages+=(sqlite3)
have python3 || apt_packages+=(python3)
have tar || apt_packages+=(tar)
have nm || apt_packages+=(binutils)
have pkill || apt_packages+=(procps)
have setpriv || apt_packages+=(util-linux)  # the daemon tests run a client as another user
have make || apt_packages+=(make)
# Extended attributes and ACLs on every frontend: setfacl/getfacl, setfattr/getfattr, rsync -AX.
have setfacl || apt_packages+=(acl)
have setfattr || apt_packages+=(attr)
have rsync || apt_packages+=(rsync)
# Programs that bring their own allocator (the shim must be safe inside it): jemalloc and
# tcmalloc to preload, and Redis, which Debian links with jemalloc (issue 38).
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || [ "$(uname -m)" != x86_64 ] || apt_packages+=(libjemalloc2)
[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] || [ "$(uname -m)" != x86_64 ] || apt_packages+=(libtcmalloc-minimal4)
have redis-server || apt_packages+=(redis-server)
# MariaDB with its default configuration (InnoDB asks for io_uring and libaio) as a daemon
# client.
have mariadbd || apt_packages+=(mariadb-server)
# RocksDB's db_bench and ldb, an LSM store's synced writes.
have db_bench || apt_packages+=(rocksdb-tools)
# `nosefs bench --workload oltp`: sysbench's oltp_read_write on MariaDB.
have sysbench || apt_packages+=(sysbench)
# scripts/stress-ng-suite.sh: stress-ng's file-system and I/O stressors on every frontend.
have stress-ng || apt_packages+=(stress-ng)
# PostgreSQL, a server of many processes, as daemon clients (postgresql-contrib: amcheck).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || apt_packages+=(postgresql postgresql-contrib)
# LMDB with write-mapped commits (the shim's mapped-file test), through Debian's python3.
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import lmdb' 2>/dev/null || apt_packages+=(python3-lmdb)
# `nosefs bench --workload kv`: YCSB on LevelDB, an LSM store, through Debian's python3.
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import plyvel' 2>/dev/null || apt_packages+=(python3-plyvel)
if ! command -v cargo >/dev/null 2>&1; then
  # Debian's own Rust, for machines without rustup. noseFS needs Rust 1.80 or newer.
  apt_packages+=(cargo rustc)
fi
if [ "${#apt_packages[@]}" -gt 0 ]; then
  log "apt-get install ${apt_packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi
# CPython's regression tests for scripts/python-suites.sh, for Debian's python3: the package is
# named by python3's version, so it is asked for once python3 is there (installed just above on
# a fresh machine).
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import test.test_os' 2>/dev/null; then
  testsuite="libpython$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')-testsuite"
  log "apt-get install $testsuite"
  export DEBIAN_FRONTEND=noninteractive
  [ "${#apt_packages[@]}" -gt 0 ] || apt-get update -qq
  apt-get install -y -qq "$testsuite" >/dev/null
fi

need_version="1.80.0"
have_version="$(rustc --version | awk '{print $2}')"
if [ "$(printf '%s\n%s\n' "$need_version" "$have_version" | sort -V | head -n1)" != "$need_version" ]; then
  log "rustc $have_version is older than the $need_version noseFS needs"
  exit 1
fi

# rustfmt and clippy: rustup components where rustup manages the toolchain, else Debian packages.
for tool in rustfmt clippy; do
  probe="cargo $([ "$tool" = clippy ] && echo clippy || echo fmt) --version"
  if ! $probe >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
      log "rustup component add $tool"
      rustup component add "$tool"
    else
      log "apt-get install $([ "$tool" = clippy ] && echo rust-clippy || echo rustfmt)"
      apt-get install -y -qq "$([ "$tool" = clippy ] && echo rust-clippy || echo rustfmt)" >/dev/null
    fi
  fi
done
log "ready: $(cargo --version)"
