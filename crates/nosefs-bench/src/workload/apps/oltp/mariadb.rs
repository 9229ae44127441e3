//! MariaDB (InnoDB, its default configuration: every commit flushed) served on the place, with
//! sysbench's `oltp_read_write` from two clients over its socket (seed 000 ran MySQL). After the
//! run the server is stopped and started again, and every table must hold all its rows and
//! pass CHECK TABLE.

use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::super::{checked, installed, path_arg, timed, Measured, Place};
use crate::scratch::scratch_dir;

const TABLES: usize = 2;
const TABLE_ROWS: usize = 10_000;
const CLIENTS: usize = 2;

/// sysbench oltp_read_write on MariaDB.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    place.many_processes("mariadb-install-db runs several processes at once")?;
    installed(&["/usr/sbin/mariadbd", "/usr/bin/sysbench"])?;
    let mut server = Server {
        place,
        data: place.dir.join("mariadb"),
        sock_dir: scratch_dir("app-mariadb")?,
        process: None,
    };
    let result = server.sysbench(ops);
    server.clean_up();
    result
}

struct Server<'a> {
    place: &'a Place,
    data: PathBuf,
    /// The socket's directory, outside the target: mariadbd, as user mysql, binds there.
    sock_dir: PathBuf,
    process: Option<Child>,
}

impl Server<'_> {
    fn sock(&self) -> PathBuf {
        self.sock_dir.join("sock")
    }

    /// A client outside the shim, over the socket, as root (unix_socket authentication).
    fn client(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.arg("-S")
            .arg(self.sock())
            .arg("-uroot")
            .env_remove("LD_PRELOAD");
        c
    }

    fn sql(&self, statements: &str) -> io::Result<String> {
        let mut c = self.client("mariadb");
        c.args(["-N", "-e", statements]);
        checked(c, "mariadb")
    }

    fn install(&self) -> io::Result<()> {
        self.place
            .run("mkdir", &["-p".as_ref(), self.data.as_os_str()])?;
        self.place
            .run("chown", &["mysql:mysql".as_ref(), self.data.as_os_str()])?;
        let mut chown = Command::new("chown");
        chown.arg("mysql:mysql").arg(&self.sock_dir);
        checked(chown, "chown")?;
        let mut install = self.place.command("timeout");
        install
            .args(["120", "mariadb-install-db", "--user=mysql"])
            .arg(format!("--datadir={}", path_arg(&self.data)?));
        checked(install, "mariadb-install-db")?;
        Ok(())
    }

    fn start(&mut self) -> io::Result<()> {
        let mut c = self.place.command("mariadbd");
        c.arg("--user=mysql")
            .arg(format!("--datadir={}", path_arg(&self.data)?))
            .arg(format!("--socket={}", path_arg(&self.sock())?))
            .arg("--skip-networking")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.process = Some(c.spawn()?);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.sql("select 1").is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .process
                .as_mut()
                .and_then(|p| p.try_wait().ok())
                .flatten()
            {
                return Err(io::Error::other(format!(
                    "mariadbd exited at start: {status}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(io::Error::other("mariadbd did not answer within 60 s"))
    }

    fn stop(&mut self) -> io::Result<()> {
        checked(
            {
                let mut c = self.client("mariadb-admin");
                c.arg("shutdown");
                c
            },
            "mariadb-admin shutdown",
        )?;
        if let Some(mut p) = self.process.take() {
            p.wait()?;
        }
        Ok(())
    }

    fn sysbench_command(&self, action: &str) -> io::Result<Command> {
        let mut c = Command::new("sysbench");
        c.args(["oltp_read_write", "--db-driver=mysql", "--mysql-user=root"])
            .arg(format!("--mysql-socket={}", path_arg(&self.sock())?))
            .args(["--mysql-db=sbtest", &format!("--tables={TABLES}")])
            .arg(format!("--table-size={TABLE_ROWS}"))
            .arg(action)
            .env_remove("LD_PRELOAD");
        Ok(c)
    }

    fn sysbench(&mut self, ops: usize) -> io::Result<Vec<Measured>> {
        self.install()?;
        self.start()?;
        self.sql("create database sbtest")?;
        checked(self.sysbench_command("prepare")?, "sysbench prepare")?;
        let mut bench = self.sysbench_command("run")?;
        bench.args([
            &format!("--threads={CLIENTS}"),
            &format!("--events={ops}"),
            "--time=0",
            "--histogram=on",
        ]);
        let started = Instant::now();
        let report = checked(bench, "sysbench run")?;
        let elapsed_ns = started.elapsed().as_nanos() as u64;
        self.stop()?;
        self.start()?;
        for table in 1..=TABLES {
            let out = self.sql(&format!(
                "select count(*) from sbtest.sbtest{table}; check table sbtest.sbtest{table}"
            ))?;
            let want = format!("{TABLE_ROWS}\nsbtest.sbtest{table}\tcheck\tstatus\tOK\n");
            if out != want {
                return Err(io::Error::other(format!(
                    "MariaDB lost or corrupted rows across a restart: sbtest{table}: {out:?}"
                )));
            }
        }
        self.stop()?;
        let latencies_ns = histogram(&report)?;
        if latencies_ns.len() != ops {
            return Err(io::Error::other(format!(
                "sysbench reported {} transactions of {ops}",
                latencies_ns.len()
            )));
        }
        let variant = format!("sysbench -c {CLIENTS}, {TABLES}x{TABLE_ROWS} rows");
        Ok(vec![timed(
            "oltp-read-write",
            &variant,
            0,
            elapsed_ns,
            &latencies_ns,
        )?])
    }

    fn clean_up(&mut self) {
        // Whatever happened, no server stays behind (install-db's bootstrap server included).
        if let Some(mut p) = self.process.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
        let _ = Command::new("pkill")
            .args(["-9", "-f", "--"])
            .arg(format!("--datadir={}", self.data.display()))
            .output();
        let _ = self
            .place
            .run("rm", &["-rf".as_ref(), self.data.as_os_str()]);
        let _ = std::fs::remove_dir_all(&self.sock_dir);
    }
}

/// sysbench's `--histogram` (`value_ms |***  count` per line): one latency per transaction.
fn histogram(report: &str) -> io::Result<Vec<u64>> {
    let mut latencies_ns = Vec::new();
    for line in report.lines() {
        let Some((value, rest)) = line.split_once('|') else {
            continue;
        };
        let (Ok(value_ms), Some(Ok(count))) = (
            value.trim().parse::<f64>(),
            rest.split_whitespace().last().map(str::parse::<usize>),
        ) else {
            continue;
        };
        let latency_ns = (value_ms * 1e6) as u64;
        latencies_ns.extend(std::iter::repeat(latency_ns).take(count));
    }
    Ok(latencies_ns)
}
