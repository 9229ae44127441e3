//! PostgreSQL 15 with its default configuration (fsync and synchronous_commit on), as the
//! postgres user on the place: pgbench's TPC-B-like transactions (`tpcb`), then the TPC-C-like
//! mix of `tpcc/` as pgbench scripts (`tpcc`, `tpcc-new-order`), two clients each. After each
//! run the server is restarted and must hold what was committed.

use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use super::super::{checked, free_port, installed, timed, Measured, Place};
use super::{Tpcc, TPCC_MIX};
use crate::scratch::scratch_dir;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const CLIENTS: usize = 2;

/// Both PostgreSQL workloads on one cluster.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    place.many_processes("PostgreSQL is a server of many processes")?;
    installed(&[&format!("{PG_BIN}/initdb")])?;
    let server = Server {
        place,
        data: place.dir.join("pg"),
        sock: scratch_dir("app-pg")?,
        logs: scratch_dir("app-pgbench")?,
        port: free_port()?.to_string(),
    };
    let result = server.init().and_then(|()| {
        let mut all = vec![server.tpcb(ops)?];
        all.extend(server.tpcc(ops)?);
        Ok(all)
    });
    server.clean_up();
    result
}

/// A cluster in `data` on the place, listening on a socket in `sock`.
struct Server<'a> {
    place: &'a Place,
    data: PathBuf,
    sock: PathBuf,
    /// pgbench's logs and scripts: the clients' working directory.
    logs: PathBuf,
    port: String,
}

impl Server<'_> {
    /// A PostgreSQL program on the place, as the postgres user.
    fn as_postgres(&self, program: &str) -> Command {
        let mut c = self.place.command("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(format!("{PG_BIN}/{program}"));
        c
    }

    /// A client (pgbench, psql): outside the shim, over the socket.
    fn client(&self, program: &str, database: &str) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(format!("{PG_BIN}/{program}"))
            .arg("-h")
            .arg(&self.sock)
            .args(["-p", &self.port, "-d", database])
            .env_remove("LD_PRELOAD")
            .current_dir(&self.logs);
        c
    }

    fn ctl(&self, action: &str) -> io::Result<String> {
        let mut c = self.as_postgres("pg_ctl");
        c.arg("-D")
            .arg(self.data.join("data"))
            .arg("-o")
            .arg(format!(
                "-k {} -p {} -c listen_addresses=",
                self.sock.display(),
                self.port
            ))
            .arg("-l")
            .arg(self.logs.join("server.log"))
            .args(["-w", action]);
        checked(c, &format!("pg_ctl {action}"))
    }

    fn restart(&self) -> io::Result<()> {
        self.ctl("stop")?;
        self.ctl("start")?;
        Ok(())
    }

    fn init(&self) -> io::Result<()> {
        self.place
            .run("mkdir", &["-p".as_ref(), self.data.as_os_str()])?;
        self.place.run(
            "chown",
            &["postgres:postgres".as_ref(), self.data.as_os_str()],
        )?;
        for dir in [&self.sock, &self.logs] {
            let mut c = Command::new("chown");
            c.arg("postgres:postgres").arg(dir);
            checked(c, "chown")?;
        }
        let mut initdb = self.as_postgres("initdb");
        initdb.arg("-D").arg(self.data.join("data"));
        checked(initdb, "initdb")?;
        self.ctl("start")?;
        Ok(())
    }

    /// pgbench's own TPC-B-like transactions; then every committed one has its history row.
    fn tpcb(&self, ops: usize) -> io::Result<Measured> {
        let mut init = self.client("pgbench", "postgres");
        init.args(["-i", "-s", "2", "-q"]);
        checked(init, "pgbench -i")?;
        let per_client = (ops / CLIENTS).max(1);
        let (elapsed_ns, log) = self.pgbench("postgres", "tx", &["-t", &per_client.to_string()])?;
        self.restart()?;
        let mut check = self.client("psql", "postgres");
        check.arg("-Atq").args([
            "-c",
            "select count(*) from pgbench_history",
            "-c",
            "create extension if not exists amcheck",
            "-c",
            "select bt_index_check('pgbench_accounts_pkey')",
        ]);
        let out = checked(check, "psql")?;
        let done = log.len();
        if out.lines().next() != Some(done.to_string().as_str()) {
            return Err(io::Error::other(format!(
                "PostgreSQL lost committed transactions across a restart: history {out:?}, {done} committed"
            )));
        }
        let latencies_ns: Vec<u64> = log.iter().map(|t| t.latency_ns).collect();
        timed(
            "tpcb",
            &format!("pgbench -c {CLIENTS}"),
            0,
            elapsed_ns,
            &latencies_ns,
        )
    }

    /// The TPC-C-like mix as pgbench scripts; then TPC-C's consistency checks and the committed
    /// orders and payments, after a restart.
    fn tpcc(&self, ops: usize) -> io::Result<Vec<Measured>> {
        let tpcc = Tpcc::SCALED;
        for (name, text) in super::TPCC_FILES {
            std::fs::write(self.logs.join(name), text)?;
        }
        let mut create = self.client("psql", "postgres");
        create.args(["-q", "-c", "create database tpcc"]);
        checked(create, "create database")?;
        let mut load = self.client("psql", "tpcc");
        load.args(["-q", "-v", "ON_ERROR_STOP=1", "-f", "schema.sql"])
            .args(tpcc.variables("-v"))
            .args(["-f", "load-pg.sql"]);
        checked(load, "the TPC-C load")?;
        let mut args: Vec<String> = tpcc.variables("-D");
        for (script, weight) in TPCC_MIX {
            args.push("-f".into());
            args.push(format!("{script}.sql@{weight}"));
        }
        args.extend(["--max-tries=10".into(), "-t".into()]);
        args.push((ops / CLIENTS).max(1).to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (elapsed_ns, log) = self.pgbench("tpcc", "tpcc", &args)?;
        self.restart()?;
        let mut check = self.client("psql", "tpcc");
        check.args(["-Atq", "-f", "check.sql"]);
        let counts = checked(check, "the TPC-C checks")?;
        let by_script = |script: usize| log.iter().filter(move |t| t.script == script);
        tpcc.check(
            "PostgreSQL",
            &counts,
            by_script(0).count(),
            by_script(1).count(),
        )?;
        let variant = format!("pgbench -c {CLIENTS}, {}", tpcc.describe());
        let all: Vec<u64> = log.iter().map(|t| t.latency_ns).collect();
        let new_orders: Vec<u64> = by_script(0).map(|t| t.latency_ns).collect();
        Ok(vec![
            timed("tpcc", &variant, 0, elapsed_ns, &all)?,
            timed("tpcc-new-order", &variant, 0, elapsed_ns, &new_orders)?,
        ])
    }

    /// Runs pgbench from `CLIENTS` clients with `args` on `database`, each transaction logged;
    /// the run's time and the committed transactions.
    fn pgbench(
        &self,
        database: &str,
        prefix: &str,
        args: &[&str],
    ) -> io::Result<(u64, Vec<Logged>)> {
        let mut bench = self.client("pgbench", database);
        bench
            .args(["-n", "-c", &CLIENTS.to_string(), "-j", &CLIENTS.to_string()])
            .args(args)
            .args(["-l", &format!("--log-prefix={prefix}")]);
        let started = Instant::now();
        checked(bench, "pgbench")?;
        let elapsed_ns = started.elapsed().as_nanos() as u64;
        let mut log = Vec::new();
        for entry in std::fs::read_dir(&self.logs)? {
            let path = entry?.path();
            let name = path.file_name().map(|f| f.to_string_lossy().into_owned());
            if name.is_some_and(|f| f.starts_with(&format!("{prefix}."))) {
                log.extend(parse_log(&std::fs::read_to_string(&path)?)?);
            }
        }
        Ok((elapsed_ns, log))
    }

    fn clean_up(&self) {
        // Whatever happened, no server stays behind.
        let _ = self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.data.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = self
            .place
            .run("rm", &["-rf".as_ref(), self.data.as_os_str()]);
        let _ = std::fs::remove_dir_all(&self.sock);
        let _ = std::fs::remove_dir_all(&self.logs);
    }
}

/// A committed transaction in pgbench's log.
struct Logged {
    latency_ns: u64,
    /// The script's number, in the order of the `-f` options.
    script: usize,
}

/// pgbench's log: `client transaction latency_us script epoch epoch_us [retries]` per
/// transaction; a failed one has `failed` for its latency and is not committed.
fn parse_log(text: &str) -> io::Result<Vec<Logged>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(2) == Some(&"failed") {
            continue;
        }
        let parsed = fields
            .get(2)
            .and_then(|l| l.parse::<u64>().ok())
            .zip(fields.get(3).and_then(|s| s.parse::<usize>().ok()));
        let (latency_us, script) =
            parsed.ok_or_else(|| io::Error::other(format!("pgbench's log line {line:?}")))?;
        out.push(Logged {
            latency_ns: latency_us * 1000,
            script,
        });
    }
    Ok(out)
}
