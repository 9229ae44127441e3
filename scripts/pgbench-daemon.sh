#!/usr/bin/env bash
# PostgreSQL 15 with its default configuration as clients of a `nosefs mount` daemon, pgbench -c 2
# from outside the shim for SECONDS; with `perf`, a system-wide profile of 8 s of it into
# /tmp/perf.pgbench (issue 39's measurement). Then what the daemon served (`-o stats`): requests
# by kind with the daemon's time on them, its sleeps, connections; and the transactions pgbench
# completed, to divide by. Needs root, /dev/fuse, PostgreSQL 15.
#   scripts/pgbench-daemon.sh SECONDS [perf]
# NOSEFS_BIN=DIR picks the nosefs binary (and the shim beside it) to measure.
set -euo pipefail
seconds="${1:-10}"
bin="${NOSEFS_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}"
nosefs="$bin/nosefs"
pg=/usr/lib/postgresql/15/bin
work="$(mktemp -d /tmp/pgbench-daemon.XXXXXX)"
chmod 755 "$work"
mkdir -p "$work/m" "$work/sock" "$work/log"
chown postgres "$work/sock" "$work/log"
image=/dev/shm/"$(basename "$work")".img
port=5499
as_pg() { "$nosefs" run --at "$work/m" -- setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
client() { (cd /tmp && setpriv --reuid=postgres --regid=postgres --init-groups "$pg/$1" -h "$work/sock" -p "$port" "${@:2}"); }
cleanup() {
  as_pg "$pg/pg_ctl" -D "$work/m/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
  mountpoint -q "$work/m" && umount "$work/m"
  rm -rf "$work" "$image"
}
trap cleanup EXIT
"$nosefs" mkfs "$image" --size 4G >/dev/null
"$nosefs" mount -o "allow_other,stats=$work/stats.txt" "$image" "$work/m"
mkdir "$work/m/pg"
chown postgres:postgres "$work/m/pg"
as_pg "$pg/initdb" -D "$work/m/pg/data" >/dev/null 2>&1
as_pg "$pg/pg_ctl" -D "$work/m/pg/data" -o "-k $work/sock -p $port -c listen_addresses=" \
  -l "$work/log/server.log" -w start >/dev/null
client pgbench -i -s 2 -q postgres >/dev/null 2>&1
pick='^tps|^number of transactions actually processed'
if [ "${2:-}" = perf ]; then
  client pgbench -n -c 2 -j 2 -T "$seconds" postgres 2>&1 | grep -E "$pick" &
  sleep 3
  perf record -q -a -g -o /tmp/perf.pgbench -- sleep 8
  wait
else
  client pgbench -n -c 2 -j 2 -T "$seconds" postgres 2>&1 | grep -E "$pick"
fi
as_pg "$pg/pg_ctl" -D "$work/m/pg/data" -m fast -w stop >/dev/null
umount "$work/m"
for _ in $(seq 50); do
  [ -s "$work/stats.txt" ] && break
  sleep 0.1
done
echo "what the daemon served (requests by kind, its time on them; the whole run, initdb and pgbench -i included):"
cat "$work/stats.txt"
