//! Databases and servers as clients with their default configuration: PostgreSQL, MariaDB,
//! RocksDB, Redis and programs with their own allocator, their data checked after.

use super::*;

#[test]
fn programs_with_their_own_allocator_and_redis_run_as_clients() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    let script = format!("PORT=16392\n{}", common::ALLOCATORS_SCRIPT);
    let out = same_as_kernel(&m, &script);
    if std::path::Path::new("/usr/bin/redis-server").exists() {
        assert!(out.contains("v\n2\na\nb\nc\n"), "{out}");
    }
    m.unmount_and_fsck();
}

/// PostgreSQL 15 with its default configuration (issue 38), a server of many processes, all
/// daemon clients, run as the postgres user: initdb, pgbench's tables, a restart, every row
/// there and amcheck's verdict on the primary key.
#[test]
fn postgresql_runs_with_its_default_configuration() {
    let bin = Path::new("/usr/lib/postgresql/15/bin");
    if !usable() || !bin.join("initdb").exists() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let script = r#"set -e
bin=/usr/lib/postgresql/15/bin
mkdir "$D/pg"; chown postgres:postgres "$D/pg"
sock="$(mktemp -d /tmp/nosefs-pg.XXXXXX)"; chown postgres "$sock"
trap 'pkill -9 -f -- "-D $D/pg/data" || true; rm -rf "$sock"' EXIT
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
cd /
as_pg timeout 120 $bin/initdb -D "$D/pg/data" >/dev/null
ctl() { as_pg timeout 120 $bin/pg_ctl -D "$D/pg/data" -o "-k $sock -p 54330 -c listen_addresses=" -l "$sock/log" -w "$@" >/dev/null; }
ctl start
as_pg timeout 120 $bin/pgbench -h "$sock" -p 54330 -i -s 1 -q postgres >/dev/null 2>&1
as_pg timeout 120 $bin/pgbench -h "$sock" -p 54330 -c 2 -t 200 -n postgres >/dev/null
ctl stop
ctl start
as_pg psql -h "$sock" -p 54330 -Atq postgres -c "select count(*) from pgbench_accounts" -c "create extension amcheck" -c "select bt_index_check('pgbench_accounts_pkey')" -c "select count(*) from pgbench_history"
ctl stop
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "100000\n\n400\n", "{}", text(&out));
    m.unmount_and_fsck();
}

/// RocksDB's db_bench (issue 38): 3,000 synced writes, then another process finds every key
/// (readrandom) and ldb scans exactly that many.
#[test]
fn rocksdb_keeps_every_synced_write() {
    if !usable() || !Path::new("/usr/bin/db_bench").exists() {
        return;
    }
    let m = mount_with(&[]);
    let script = r#"set -e
db_bench --benchmarks=fillseq --sync=1 --num=3000 --value_size=100 --db="$D/rocks" >/dev/null
db_bench --benchmarks=readrandom --use_existing_db=1 --num=3000 --reads=3000 --db="$D/rocks" | grep -o '([0-9]* of [0-9]* found)'
ldb --db="$D/rocks" scan | wc -l
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "(3000 of 3000 found)\n3000\n",
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}

/// MariaDB with its default configuration (issue 38): InnoDB asks for io_uring, then libaio,
/// both of which the shim refuses as a kernel without them does, and falls back to its own
/// threads; the data is there after a restart and CHECK TABLE finds it sound.
#[test]
fn mariadb_runs_with_its_default_configuration() {
    if !usable() || !Path::new("/usr/sbin/mariadbd").exists() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let script = r#"set -e
mkdir "$D/data"; chown mysql:mysql "$D/data"
sock="$(mktemp -u /tmp/nosefs-maria.XXXXXX)"
log="$(mktemp /tmp/nosefs-maria-log.XXXXXX)"; chmod 666 "$log"
# A server that hangs (install-db's bootstrap runs one as its child, which `timeout` does not
# reach) must not outlive the test.
trap 'pkill -9 -f -- "--datadir=$D/data" || true' EXIT
timeout 120 mariadb-install-db --user=mysql --datadir="$D/data" >/dev/null 2>&1
serve() {
  timeout 120 mariadbd --user=mysql --datadir="$D/data" --socket="$sock" --skip-networking \
    --log-error="$log" >/dev/null 2>&1 &
  for _ in $(seq 1 300); do mariadb -S "$sock" -uroot -e 'select 1' >/dev/null 2>&1 && return; sleep 0.1; done
  echo "mariadbd did not start"
}
serve
mariadb -S "$sock" -uroot -e "create database t; use t; create table x (id int primary key, v varchar(100)) engine=innodb; insert into x select seq, repeat('v', 90) from seq_1_to_5000;"
mariadb-admin -S "$sock" -uroot shutdown
wait
serve
mariadb -S "$sock" -uroot -N -e "select count(*) from t.x; check table t.x;"
mariadb-admin -S "$sock" -uroot shutdown
wait
# InnoDB's default, native AIO (the shim's Linux AIO), at both starts; io_uring is refused.
grep -c "InnoDB: Using Linux native AIO" "$log"; rm -f "$log"
"#;
    let out = m.run(script);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("5000\nt.x\tcheck\tstatus\tOK\n2\n"),
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}
