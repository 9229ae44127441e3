//! The transport's own cost: the round trip of an empty request (client spinning, server
//! polling), the first request after the server went to sleep (1 s idle), and a one-name walk;
//! the server's CPU time per request (this process's CPU time less the calling thread's), also
//! for create+close by path and for a 4 KiB append+fsync; and empty requests from two threads
//! of one client at once against one.
//! The server runs in this process on its own threads, as it does in `nosefs mount`.
//!
//! `cargo run --release -p nosefs-daemon --example round_trip [-- ROUNDS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_daemon::client::Remote;
use nosefs_daemon::server::{Options, Server};
use nosefs_daemon::service::{OpenedPath, Service};
use rustix::time::ClockId;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn report(what: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    println!(
        "{what:<36} p50 {:>7} ns   p99 {:>7} ns   max {:>8} ns   ({} samples)",
        percentile(&ns, 0.5),
        percentile(&ns, 0.99),
        ns[ns.len() - 1],
        ns.len()
    );
}

/// CPU time of this process or of the calling thread.
fn cpu_ns(clock: rustix::time::ClockId) -> u64 {
    let t = rustix::time::clock_gettime(clock);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Runs `op(i)` `rounds` times: each one's latency, and the server's CPU time per op.
fn timed(rounds: usize, mut op: impl FnMut(usize)) -> (Vec<u64>, u64) {
    let mut ns = Vec::with_capacity(rounds);
    let process_before = cpu_ns(ClockId::ProcessCPUTime);
    let thread_before = cpu_ns(ClockId::ThreadCPUTime);
    for i in 0..rounds {
        let t = Instant::now();
        op(i);
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let server_cpu_ns = (cpu_ns(ClockId::ProcessCPUTime) - process_before)
        .saturating_sub(cpu_ns(ClockId::ThreadCPUTime) - thread_before);
    (ns, server_cpu_ns / rounds as u64)
}

/// Empty requests per second from `threads` threads of one connection.
fn nops_per_s(client: &Remote, threads: usize, per_thread: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    client.nop().unwrap();
                }
            });
        }
    });
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = dir.path().join("img");
    let params = MkfsParams {
        image_bytes: 512 << 20,
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(&image, &params).unwrap();
    let fs = Arc::new(Fs::mount(&image, &MountOptions::default()).unwrap());
    let view = dir.path().join("view");
    std::fs::create_dir(&view).unwrap();
    let options = Options {
        allow_other: false,
        invalidate: None,
        stats: false,
        direct_reads: true,
    };
    let server = Server::start(Arc::clone(&fs), &view, options).unwrap();
    let st = rustix::fs::stat(&view).unwrap();
    let me = rustix::process::geteuid().as_raw();
    let prefix = view.as_os_str().as_encoded_bytes();
    let client = Remote::connect_device(
        rustix::fs::major(st.st_dev),
        rustix::fs::minor(st.st_dev),
        me,
        prefix,
    )
    .unwrap();
    for _ in 0..10_000 {
        client.nop().unwrap();
    }
    let (ns, server_cpu_ns) = timed(rounds, |_| client.nop().unwrap());
    report("empty request, back to back", ns);
    println!(
        "{:<36} {server_cpu_ns} ns per request (it polls while requests come)",
        "server CPU, back to back",
    );
    let files = 20_000.min(rounds);
    let (ns, server_cpu_ns) = timed(files, |i| {
        let path = view
            .join(format!("f{i}"))
            .into_os_string()
            .into_encoded_bytes();
        match client.open_path(path, true, libc::O_CREAT | libc::O_WRONLY, 0o644, 0o022) {
            Ok(OpenedPath::Opened(_, opened)) => client.close(opened.handle),
            other => panic!("create: {other:?}"),
        }
    });
    report("create+close by path", ns);
    println!("{:<36} {server_cpu_ns} ns per create+close", "server CPU");
    let log = view.join("log").into_os_string().into_encoded_bytes();
    let Ok(OpenedPath::Opened(_, log)) =
        client.open_path(log, true, libc::O_CREAT | libc::O_WRONLY, 0o644, 0o022)
    else {
        panic!("cannot create the log");
    };
    let block = [7u8; 4096];
    let (ns, server_cpu_ns) = timed(files, |_| {
        client.write(log.handle, 0, &block, true).unwrap();
        client.fsync(log.handle).unwrap();
    });
    report("4 KiB append+fsync", ns);
    println!("{:<36} {server_cpu_ns} ns per append+fsync", "server CPU");
    client.close(log.handle);
    let one = nops_per_s(&client, 1, rounds);
    let two = nops_per_s(&client, 2, rounds);
    println!(
        "{:<36} one thread {one:.0}/s, two threads {two:.0}/s ({:.2}x)",
        "empty requests, one client",
        two / one
    );
    let path = view.join("name").into_os_string().into_encoded_bytes();
    let mut ns = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        client.walk(path.clone(), true).unwrap();
        ns.push(t.elapsed().as_nanos() as u64);
    }
    report("walk of one name, back to back", ns);
    let mut ns = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        let t = Instant::now();
        client.nop().unwrap();
        ns.push(t.elapsed().as_nanos() as u64);
    }
    report("empty request after 1 s idle", ns);
    drop(client);
    drop(server);
}
