//! `redis`: redis-server with an append-only file synced at every write.

use std::io;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, measured, run_driver, Measured, Place};

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

/// The `redis` workload.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
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
