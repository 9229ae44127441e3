#!/usr/bin/env bash
# MariaDB (default configuration) under sysbench oltp_read_write, 2 threads, 2 tables of 10,000
# rows, EVENTS transactions, on a fresh image as daemon clients of `nosefs mount` (client) or on
# a directory in /dev/shm (tmpfs); prints sysbench's transaction line and, for client, the
# daemon's CPU ticks during the run. STATS=FILE writes the daemon's request table there
# (`-o stats`). Needs root, /dev/fuse, mariadb-server and sysbench. docs/benchmarks.md
# ("Asynchronous I/O in processes the shim serves").
#   scripts/mariadb-sysbench.sh BINDIR client|tmpfs EVENTS
set -euo pipefail
bin="$1" target="$2" events="${3:-10000}"
sock_dir="$(mktemp -d /tmp/mariadb-sysbench.XXXXXX)"
chown mysql:mysql "$sock_dir"
mnt="$sock_dir/m" image=/dev/shm/"$(basename "$sock_dir")".img
run=()
case "$target" in
client)
  mkdir "$mnt"
  "$bin/nosefs" mkfs "$image" --size 4G >/dev/null
  "$bin/nosefs" mount "$image" "$mnt" -o "allow_other${STATS:+,stats=$STATS}"
  data="$mnt/db"
  run=("$bin/nosefs" run --at "$mnt" --)
  ;;
tmpfs)
  data=/dev/shm/"$(basename "$sock_dir")"-db
  ;;
*)
  echo "target: client or tmpfs" >&2
  exit 2
  ;;
esac
cleanup() {
  mariadb-admin -S "$sock_dir/sock" -uroot shutdown >/dev/null 2>&1 || true
  wait
  if [ "$target" = client ]; then
    sleep 0.5
    umount "$mnt" || true
    rm -f "$image"
  else
    rm -rf "$data"
  fi
  rm -rf "$sock_dir"
}
trap cleanup EXIT
"${run[@]}" mkdir -p "$data"
"${run[@]}" chown mysql:mysql "$data"
"${run[@]}" timeout 120 mariadb-install-db --user=mysql --datadir="$data" >/dev/null 2>&1
"${run[@]}" mariadbd --user=mysql --datadir="$data" --socket="$sock_dir/sock" --skip-networking \
  >/dev/null 2>&1 &
for _ in $(seq 600); do
  mariadb -S "$sock_dir/sock" -uroot -N -e "select 1" >/dev/null 2>&1 && break
  sleep 0.1
done
mariadb -S "$sock_dir/sock" -uroot -e "create database sbtest"
sb=(sysbench oltp_read_write --db-driver=mysql --mysql-user=root --mysql-socket="$sock_dir/sock"
  --mysql-db=sbtest --tables=2 --table-size=10000)
"${sb[@]}" prepare >/dev/null
daemon="$(pgrep -f -- "$(basename "$image")" | head -1 || true)"
ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
[ -n "$daemon" ] && before="$(ticks)"
"${sb[@]}" --threads=2 --events="$events" --time=0 run | grep -E "transactions:"
[ -n "$daemon" ] && echo "daemon cpu ticks: $(($(ticks) - before))"
exit 0
