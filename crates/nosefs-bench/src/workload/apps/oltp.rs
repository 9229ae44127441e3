//! `oltp`: pgbench on PostgreSQL 15 with its default configuration.

use std::io;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::{checked, free_port, timed, Measured, Place};
use crate::scratch::scratch_dir;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// PostgreSQL's commands on the place, as the postgres user.
fn as_postgres(place: &Place, program: &str) -> Command {
    let mut c = place.command("setpriv");
    c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
        .arg(format!("{PG_BIN}/{program}"));
    c
}

/// The `oltp` workload.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
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
    let sock = scratch_dir("app-pg")?;
    let logs = scratch_dir("app-pgbench")?;
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
    let mut latencies_ns = Vec::new();
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
            latencies_ns.push(latency_us * 1000);
        }
    }
    let variant = format!("pgbench -c {clients}");
    Ok(vec![timed("tpcb", &variant, 0, elapsed_ns, &latencies_ns)?])
}
