//! `sqlite`: SQLite through Debian's python3, rollback journal and WAL.

use std::io;

use super::{measured, path_arg, run_driver, Measured, Place};

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

/// The `sqlite` workload (see the module above).
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
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
