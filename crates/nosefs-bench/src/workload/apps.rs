//! Application workloads (issue 38): the real programs, unmodified, on the target, with their own
//! durability settings, timed per operation by a small client, and their data checked after the
//! run (a workload that loses or corrupts data fails the run loudly).
//!
//! - `sqlite`: Debian's python3 and its SQLite; one durable transaction per operation
//!   (`synchronous=FULL`), inserts of 100-byte rows then updates of random rows (a database's
//!   page rewrites), in rollback-journal and WAL mode; then `PRAGMA integrity_check` and the
//!   row count.
//! - `redis`: redis-server with `appendonly yes` and `appendfsync always` (every write durable
//!   before its reply); one client sends SET, INCR and LPUSH over a socket, one at a time; then
//!   the server is stopped without a save and started again, and must read back every key,
//!   the counter and the list from its append-only file.
//! - `kv`: YCSB's core workloads A-F (seed 000 Table II: read/update, read-mostly, read-only,
//!   read-latest with inserts, short scans with inserts, read-modify-write; zipfian keys, the
//!   latest for D) on LMDB (python3-lmdb, memory-mapped like seed 000's MongoDB engine), 1 KB
//!   records, every write one durable transaction; then every record the run wrote is read
//!   back and compared.
//! - `oltp`: PostgreSQL 15 with its default configuration (fsync and synchronous_commit on),
//!   pgbench's TPC-B-like transactions from two clients (each transaction's latency from
//!   pgbench's log); then the server is restarted and must hold one history row per committed
//!   transaction, with amcheck's verdict on the accounts' primary key. A server of many
//!   processes: not in embedded mode, which serves one process at a time.
//! - `tools`: a source tree of 2,000 files in 40 directories unpacked with tar, committed with git,
//!   cloned with git, built with make -j2 (every source file copied to an output by a rule), and
//!   copied with rsync -a; each step one timed operation, every output compared with its source
//!   afterwards. Several processes at once (make's jobs, git clone's and rsync's helpers): not in
//!   embedded mode.
//!
//! Where the programs run: on the target's directory (tmpfs, a ramdisk, a FUSE mount), or under
//! the preload shim (`nosefs-client`: clients of a noseFS mount's daemon; `nosefs-preload`: an
//! embedded image made for the run, not populated, as `nosefs run` maps it). The SQLite driver
//! runs under the shim itself; the Redis client talks to the server over TCP from outside it.
//! One client: a thread count above one is reported as not run.

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Measured;
use crate::runner::Sample;
use crate::stats::histogram;

/// An application workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum App {
    /// SQLite through python3, rollback journal and WAL.
    Sqlite,
    /// Redis with an append-only file synced at every write.
    Redis,
    /// YCSB A-F on LMDB.
    Kv,
    /// pgbench on PostgreSQL.
    Oltp,
    /// tar, git, make and rsync on a source tree.
    Tools,
}

impl App {
    /// The workload's name.
    pub fn name(self) -> &'static str {
        match self {
            App::Sqlite => "sqlite",
            App::Redis => "redis",
            App::Kv => "kv",
            App::Oltp => "oltp",
            App::Tools => "tools",
        }
    }
}

/// How the programs of a run reach the target.
#[derive(Debug, Clone)]
pub struct Place {
    /// The directory the programs work in (under the shim's prefix when `shim` is set).
    pub dir: PathBuf,
    /// The preload shim, the prefix it serves (`NOSEFS_AT`: a mount point in daemon mode) and,
    /// for embedded mode, the image; `None`: the kernel's directory.
    pub shim: Option<Shim>,
}

/// How the preload shim serves a place.
#[derive(Debug, Clone)]
pub struct Shim {
    /// The shim library.
    pub lib: PathBuf,
    /// Its prefix.
    pub at: PathBuf,
    /// The image, in embedded mode; `None`: the daemon of the mount at `at`.
    pub image: Option<PathBuf>,
}

impl Place {
    /// `program`, set up to run on the target.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.stdin(Stdio::null()).env("LC_ALL", "C");
        match &self.shim {
            Some(Shim { lib, at, image }) => {
                c.env("LD_PRELOAD", lib).env("NOSEFS_AT", at);
                match image {
                    Some(image) => c.env("NOSEFS_IMAGE", image),
                    None => c.env_remove("NOSEFS_IMAGE"),
                };
            }
            None => {
                c.env_remove("LD_PRELOAD");
            }
        }
        c
    }

    /// Runs `program args` on the place (so that a directory made in embedded mode is made in
    /// the image, not in the kernel's directory under the prefix).
    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> io::Result<()> {
        let out = self.command(program).args(args).output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "{program} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }
}

/// Runs `app` once on `place` with `threads` clients.
pub fn run_once(app: App, place: &Place, threads: usize, ops: usize) -> io::Result<Vec<Measured>> {
    if threads != 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "application workloads run one client",
        ));
    }
    match app {
        App::Sqlite => sqlite(place, ops),
        App::Redis => redis(place, ops),
        App::Kv => kv(place, ops),
        App::Oltp => oltp(place, ops),
        App::Tools => tools(place),
    }
}

const PYTHON: &str = "/usr/bin/python3";

/// The SQLite driver: phases of one durable transaction each, latencies in ns, then the checks.
const SQLITE_DRIVER: &str = r#"
import json, os, random, sqlite3, sys, time
path, journal, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = sqlite3.connect(path, isolation_level=None)
db.execute('pragma journal_mode=' + journal)
db.execute('pragma synchronous=full')
db.execute('create table t (id integer primary key, v blob)')
rnd = random.Random(7)
phases = []
for op in ('insert', 'update'):
    lat = []
    start = time.perf_counter_ns()
    for i in range(n):
        t = time.perf_counter_ns()
        if op == 'insert':
            db.execute('insert into t values (?, ?)', (i, os.urandom(100)))
        else:
            db.execute('update t set v = ? where id = ?', (os.urandom(100), rnd.randrange(n)))
        lat.append(time.perf_counter_ns() - t)
    phases.append({'op': op, 'elapsed_ns': time.perf_counter_ns() - start, 'lat': lat})
check = db.execute('pragma integrity_check').fetchone()[0]
rows = db.execute('select count(*) from t').fetchone()[0]
db.close()
print(json.dumps({'phases': phases, 'check': check, 'rows': rows}))
"#;

fn sqlite(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    let mut out = Vec::new();
    for journal in ["delete", "wal"] {
        let db = place.dir.join(format!("bench-{journal}.db"));
        let report = run_driver(
            place,
            SQLITE_DRIVER,
            &[path_arg(&db)?, journal, &ops.to_string()],
        )?;
        let check = report["check"].as_str().unwrap_or("");
        let rows = report["rows"].as_u64().unwrap_or(0);
        if check != "ok" || rows != ops as u64 {
            return Err(io::Error::other(format!(
                "SQLite ({journal}) lost or corrupted data: integrity_check {check:?}, {rows} rows of {ops}"
            )));
        }
        for phase in report["phases"].as_array().into_iter().flatten() {
            out.push(measured(phase, &format!("journal={journal}"), 100)?);
        }
        for suffix in ["", "-journal", "-wal", "-shm"] {
            let file = format!("{}{suffix}", db.display());
            place.run("rm", &["-f".as_ref(), file.as_ref()])?;
        }
    }
    Ok(out)
}

/// The Redis client: `run PORT N` times SET, INCR and LPUSH one at a time; `check PORT N`
/// verifies what a restarted server read back.
const REDIS_DRIVER: &str = r#"
import json, socket, sys, time
mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
deadline = time.time() + 20
while True:
    try:
        s = socket.create_connection(('127.0.0.1', port)); break
    except OSError:
        if time.time() > deadline: raise
        time.sleep(0.02)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
f = s.makefile('rb')
def call(*args):
    msg = b'*%d\r\n' % len(args) + b''.join(b'$%d\r\n%s\r\n' % (len(a), a) for a in args)
    s.sendall(msg)
    line = f.readline()
    if line[:1] == b'$':
        size = int(line[1:])
        return None if size < 0 else f.read(size + 2)[:-2]
    if line[:1] == b'-': raise RuntimeError(line)
    return line[1:].strip()
while True:
    try:
        call(b'PING'); break
    except RuntimeError:
        time.sleep(0.02)  # loading its append-only file
value = b'v' * 100
if mode == 'run':
    phases = []
    for op in ('set', 'incr', 'lpush'):
        lat = []
        start = time.perf_counter_ns()
        for i in range(n):
            t = time.perf_counter_ns()
            if op == 'set': call(b'SET', b'key:%d' % i, value)
            elif op == 'incr': call(b'INCR', b'counter')
            else: call(b'LPUSH', b'list', value)
            lat.append(time.perf_counter_ns() - t)
        phases.append({'op': op, 'elapsed_ns': time.perf_counter_ns() - start, 'lat': lat})
    print(json.dumps({'phases': phases}))
else:
    print(json.dumps({'keys': int(call(b'DBSIZE')), 'counter': int(call(b'GET', b'counter')),
                      'list': int(call(b'LLEN', b'list'))}))
try:
    call(b'SHUTDOWN', b'NOSAVE')
except (RuntimeError, OSError, ValueError):
    pass
"#;

fn redis(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    let dir = place.dir.join("redis");
    place.run("mkdir", &["-p".as_ref(), dir.as_os_str()])?;
    let port = free_port()?;
    let kernel = Place {
        dir: place.dir.clone(),
        shim: None,
    };
    let n = ops.to_string();
    let mut server = redis_server(place, &dir, port)?;
    let report = run_driver(&kernel, REDIS_DRIVER, &["run", &port.to_string(), &n]);
    stop(&mut server);
    let report = report?;
    // A second server must find everything in the append-only file.
    let mut server = redis_server(place, &dir, port)?;
    let check = run_driver(&kernel, REDIS_DRIVER, &["check", &port.to_string(), &n]);
    stop(&mut server);
    let check = check?;
    let want = (ops as u64 + 2, ops as u64, ops as u64);
    let got = (
        check["keys"].as_u64().unwrap_or(0),
        check["counter"].as_u64().unwrap_or(0),
        check["list"].as_u64().unwrap_or(0),
    );
    if got != want {
        return Err(io::Error::other(format!(
            "Redis lost data across a restart: (keys, counter, list) {got:?}, expected {want:?}"
        )));
    }
    place.run("rm", &["-rf".as_ref(), dir.as_os_str()])?;
    report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|phase| measured(phase, "appendfsync=always", 100))
        .collect()
}

/// The YCSB driver on LMDB: a load of `records` in one transaction, then `n` operations of each
/// core workload, every write its own durable transaction; then every key's value is checked.
const KV_DRIVER: &str = r#"
import bisect, json, lmdb, random, sys, time
path, n = sys.argv[1], int(sys.argv[2])
records = 10000
env = lmdb.open(path, map_size=1 << 30)
rnd = random.Random(11)
def value(k, version):
    return (b'%d:%d:' % (k, version)).ljust(1000, b'x')
versions = {}
with env.begin(write=True) as t:
    for k in range(records):
        t.put(b'user%08d' % k, value(k, 0)); versions[k] = 0
weights, total = [], 0.0
for i in range(1, 4 * records + 1):
    total += 1.0 / i ** 0.99
    weights.append(total)
def zipf(limit):
    while True:
        i = bisect.bisect_left(weights, rnd.random() * total)
        if i < limit:
            return (i * 2654435761) % limit  # scrambled, as YCSB scrambles its zipfian keys
def latest(limit):
    while True:
        i = bisect.bisect_left(weights, rnd.random() * total)
        if i < limit:
            return limit - 1 - i
mixes = [('a', {'read': 50, 'update': 50}), ('b', {'read': 95, 'update': 5}),
         ('c', {'read': 100}), ('d', {'read': 95, 'insert': 5}),
         ('e', {'scan': 95, 'insert': 5}), ('f', {'read': 50, 'rmw': 50})]
phases = []
for name, mix in mixes:
    ops = [op for op, share in mix.items() for _ in range(share)]
    lat = []
    start = time.perf_counter_ns()
    for _ in range(n):
        op = rnd.choice(ops)
        limit = len(versions)
        k = latest(limit) if name == 'd' else zipf(limit)
        t0 = time.perf_counter_ns()
        if op == 'read':
            with env.begin() as t:
                assert t.get(b'user%08d' % k) == value(k, versions[k])
        elif op == 'scan':
            with env.begin() as t:
                c = t.cursor(); c.set_range(b'user%08d' % k)
                for _ in zip(range(1 + rnd.randrange(100)), c):
                    pass
        elif op == 'insert':
            k = limit
            with env.begin(write=True) as t:
                t.put(b'user%08d' % k, value(k, 0))
            versions[k] = 0
        else:
            with env.begin(write=True) as t:
                if op == 'rmw':
                    assert t.get(b'user%08d' % k) == value(k, versions[k])
                t.put(b'user%08d' % k, value(k, versions[k] + 1))
            versions[k] += 1
        lat.append(time.perf_counter_ns() - t0)
    phases.append({'op': 'ycsb-' + name, 'elapsed_ns': time.perf_counter_ns() - start, 'lat': lat})
env.close()
env = lmdb.open(path, map_size=1 << 30, readonly=True)
with env.begin() as t:
    bad = sum(1 for k, v in versions.items() if t.get(b'user%08d' % k) != value(k, v))
    count = t.stat()['entries']
print(json.dumps({'phases': phases, 'bad': bad, 'count': count, 'want': len(versions)}))
"#;

fn kv(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    let dir = place.dir.join("lmdb");
    place.run("mkdir", &["-p".as_ref(), dir.as_os_str()])?;
    let report = run_driver(place, KV_DRIVER, &[path_arg(&dir)?, &ops.to_string()]);
    place.run("rm", &["-rf".as_ref(), dir.as_os_str()])?;
    let report = report?;
    let (bad, count, want) = (
        report["bad"].as_u64().unwrap_or(u64::MAX),
        report["count"].as_u64().unwrap_or(0),
        report["want"].as_u64().unwrap_or(1),
    );
    if bad != 0 || count != want {
        return Err(io::Error::other(format!(
            "LMDB lost or corrupted data: {bad} records differ, {count} of {want} there"
        )));
    }
    report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|phase| measured(phase, "lmdb", 1000))
        .collect()
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// PostgreSQL's commands on the place, as the postgres user.
fn as_postgres(place: &Place, program: &str) -> Command {
    let mut c = place.command("setpriv");
    c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
        .arg(format!("{PG_BIN}/{program}"));
    c
}

fn checked(mut c: Command, what: &str) -> io::Result<String> {
    let out = c
        .output()
        .map_err(|e| io::Error::other(format!("cannot run {what}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn oltp(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    if matches!(&place.shim, Some(s) if s.image.is_some()) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "PostgreSQL is a server of many processes; embedded mode serves one at a time",
        ));
    }
    if !Path::new(PG_BIN).join("initdb").exists() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "PostgreSQL 15 is not installed",
        ));
    }
    let data = place.dir.join("pg");
    let sock = tempfile_dir("nosefs-bench-pg")?;
    let logs = tempfile_dir("nosefs-bench-pgbench")?;
    let result = oltp_run(place, &data, &sock, &logs, ops);
    // Whatever happened, no server stays behind.
    let _ = as_postgres(place, "pg_ctl")
        .arg("-D")
        .arg(&data)
        .args(["-m", "immediate", "-w", "stop"])
        .output();
    let _ = place.run("rm", &["-rf".as_ref(), data.as_os_str()]);
    let _ = std::fs::remove_dir_all(&sock);
    let _ = std::fs::remove_dir_all(&logs);
    result
}

fn oltp_run(
    place: &Place,
    data: &Path,
    sock: &Path,
    logs: &Path,
    ops: usize,
) -> io::Result<Vec<Measured>> {
    place.run("mkdir", &["-p".as_ref(), data.as_os_str()])?;
    place.run("chown", &["postgres:postgres".as_ref(), data.as_os_str()])?;
    for dir in [sock, logs] {
        checked(
            {
                let mut c = Command::new("chown");
                c.arg("postgres:postgres").arg(dir);
                c
            },
            "chown",
        )?;
    }
    let mut initdb = as_postgres(place, "initdb");
    initdb.arg("-D").arg(data.join("data"));
    checked(initdb, "initdb")?;
    let port = free_port()?.to_string();
    let ctl = |action: &str| {
        let mut c = as_postgres(place, "pg_ctl");
        c.arg("-D")
            .arg(data.join("data"))
            .arg("-o")
            .arg(format!(
                "-k {} -p {port} -c listen_addresses=",
                sock.display()
            ))
            .arg("-l")
            .arg(logs.join("server.log"))
            .args(["-w", action]);
        checked(c, &format!("pg_ctl {action}"))
    };
    // pgbench and psql are clients: they run outside the shim, over the socket.
    let client = |program: &str| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(format!("{PG_BIN}/{program}"))
            .arg("-h")
            .arg(sock)
            .args(["-p", &port])
            .env_remove("LD_PRELOAD")
            .current_dir(logs);
        c
    };
    ctl("start")?;
    let mut init = client("pgbench");
    init.args(["-i", "-s", "2", "-q", "postgres"]);
    checked(init, "pgbench -i")?;
    let clients = 2;
    let per_client = (ops / clients).max(1);
    let mut bench = client("pgbench");
    bench
        .args(["-n", "-c", &clients.to_string(), "-j", &clients.to_string()])
        .args([
            "-t",
            &per_client.to_string(),
            "-l",
            "--log-prefix=tx",
            "postgres",
        ]);
    let started = Instant::now();
    checked(bench, "pgbench")?;
    let elapsed_ns = started.elapsed().as_nanos() as u64;
    ctl("stop")?;
    ctl("start")?;
    let mut check = client("psql");
    check.args(["-Atq", "postgres"]).args([
        "-c",
        "select count(*) from pgbench_history",
        "-c",
        "create extension if not exists amcheck",
        "-c",
        "select bt_index_check('pgbench_accounts_pkey')",
    ]);
    let out = checked(check, "psql")?;
    ctl("stop")?;
    let done = clients * per_client;
    if out.lines().next() != Some(done.to_string().as_str()) {
        return Err(io::Error::other(format!(
            "PostgreSQL lost committed transactions across a restart: history {out:?}, {done} committed"
        )));
    }
    // pgbench's log: `client transaction latency_us script epoch epoch_us` per transaction.
    let mut hist = histogram();
    let mut n = 0;
    for entry in std::fs::read_dir(logs)? {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with("tx"))
        {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            let latency_us: u64 = line
                .split_whitespace()
                .nth(2)
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| io::Error::other(format!("pgbench's log line {line:?}")))?;
            hist.record((latency_us * 1000).max(1))
                .map_err(|e| io::Error::other(e.to_string()))?;
            n += 1;
        }
    }
    Ok(vec![Measured {
        op: "tpcb".into(),
        io_size: 0,
        variant: format!("pgbench -c {clients}"),
        sample: Sample {
            ops: n,
            elapsed_ns,
            hist,
            flushes: None,
            fences: None,
        },
    }])
}

/// The tools' steps, run in the place's directory: (operation, shell command).
const TOOLS_STEPS: [(&str, &str); 5] = [
    ("untar", "mkdir tree && tar -xf \"$TARBALL\" -C tree"),
    (
        "git-commit",
        "cd tree && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm tree",
    ),
    ("git-clone", "git clone -q tree clone"),
    ("make", "make -s -j2 -C clone"),
    ("rsync", "rsync -a clone/ copy/"),
];

/// Checks after the steps: every output of the build equals its source, the copy equals the
/// clone, and the clone's files are the committed ones.
const TOOLS_CHECK: &str = r#"set -e
cd clone
for f in d*/*.c; do cmp -s "$f" "${f%.c}.out" || { echo "bad build output $f"; exit 1; }; done
git status --porcelain --untracked-files=no | grep -q . && { echo "the clone differs from the commit"; exit 1; }
cd ..
diff -r clone copy >/dev/null || { echo "the rsync copy differs"; exit 1; }
ls clone/d*/*.c | wc -l
"#;

fn tools(place: &Place) -> io::Result<Vec<Measured>> {
    if matches!(&place.shim, Some(s) if s.image.is_some()) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "make -j2, git clone and rsync run several processes at once; embedded mode serves one",
        ));
    }
    let tarball = source_tarball()?;
    let work = place.dir.join("tools");
    place.run("mkdir", &["-p".as_ref(), work.as_os_str()])?;
    let result = (|| {
        let mut out = Vec::new();
        for (op, script) in TOOLS_STEPS {
            let mut c = place.command("sh");
            c.args(["-c", script])
                .current_dir(&work)
                .env("TARBALL", &tarball);
            let started = Instant::now();
            checked(c, op)?;
            let elapsed_ns = started.elapsed().as_nanos() as u64;
            let mut hist = histogram();
            hist.record(elapsed_ns.max(1))
                .map_err(|e| io::Error::other(e.to_string()))?;
            out.push(Measured {
                op: op.to_string(),
                io_size: 0,
                variant: "2000 files".into(),
                sample: Sample {
                    ops: 1,
                    elapsed_ns,
                    hist,
                    flushes: None,
                    fences: None,
                },
            });
        }
        let mut check = place.command("sh");
        check.args(["-c", TOOLS_CHECK]).current_dir(&work);
        let files = checked(check, "the tools' check")?;
        if files.trim() != TOOLS_FILES.to_string() {
            return Err(io::Error::other(format!(
                "the build has {} sources, expected {TOOLS_FILES}",
                files.trim()
            )));
        }
        Ok(out)
    })();
    place.run("rm", &["-rf".as_ref(), work.as_os_str()])?;
    let _ = std::fs::remove_file(&tarball);
    result
}

/// Files in the tools' source tree.
const TOOLS_FILES: usize = 2000;

/// Writes the tools' source tree into a tarball in /tmp (the kernel's): 40 directories of 50
/// "sources" of 1-8 KB, and a Makefile whose rule copies each to an output.
fn source_tarball() -> io::Result<PathBuf> {
    let root = tempfile_dir("nosefs-bench-tree")?;
    let mut make =
        String::from("SRC := $(wildcard d*/*.c)\nall: $(SRC:.c=.out)\n%.out: %.c\n\tcp $< $@\n");
    let mut x: u64 = 0x9e37_79b9;
    for d in 0..TOOLS_FILES / 50 {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..50 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1024 + (x % 7168) as usize;
            let body: String = (0..len)
                .map(|i| (b'a' + ((x as usize + i) % 26) as u8) as char)
                .collect();
            std::fs::write(dir.join(format!("f{f:02}.c")), body)?;
        }
    }
    make.push('\n');
    std::fs::write(root.join("Makefile"), make)?;
    let tarball = root.with_extension("tar");
    let mut tar = Command::new("tar");
    tar.arg("-cf").arg(&tarball).arg("-C").arg(&root).arg(".");
    checked(tar, "tar -c")?;
    std::fs::remove_dir_all(&root)?;
    Ok(tarball)
}

/// A new empty directory in /tmp (the kernel's), for sockets and logs.
fn tempfile_dir(prefix: &str) -> io::Result<PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), free_port()?));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn redis_server(place: &Place, dir: &Path, port: u16) -> io::Result<Child> {
    place
        .command("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
        .arg(dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .args(["--daemonize", "no", "--protected-mode", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io::Error::other(format!("cannot start redis-server: {e}")))
}

/// Waits for a server the driver told to shut down; kills it if it does not go.
fn stop(server: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = server.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = server.kill();
    let _ = server.wait();
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn path_arg(path: &Path) -> io::Result<&str> {
    path.to_str()
        .ok_or_else(|| io::Error::other("the target's path is not UTF-8"))
}

/// Runs a python driver on `place`; its JSON report.
fn run_driver(place: &Place, script: &str, args: &[&str]) -> io::Result<serde_json::Value> {
    let out = place
        .command(PYTHON)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| io::Error::other(format!("cannot run {PYTHON}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "the driver failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| io::Error::other(format!("the driver's report does not parse: {e}")))
}

/// One phase of a driver's report as a measurement.
fn measured(phase: &serde_json::Value, variant: &str, io_size: u64) -> io::Result<Measured> {
    let bad = || io::Error::other("the driver's phase is malformed");
    let op = phase["op"].as_str().ok_or_else(bad)?.to_string();
    let elapsed_ns = phase["elapsed_ns"].as_u64().ok_or_else(bad)?;
    let mut hist = histogram();
    let mut ops = 0;
    for l in phase["lat"].as_array().ok_or_else(bad)? {
        hist.record(l.as_u64().ok_or_else(bad)?.max(1))
            .map_err(|e| io::Error::other(e.to_string()))?;
        ops += 1;
    }
    Ok(Measured {
        op,
        io_size,
        variant: variant.to_string(),
        sample: Sample {
            ops,
            elapsed_ns,
            hist,
            flushes: None,
            fences: None,
        },
    })
}
