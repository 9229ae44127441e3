//! The transport's own cost: the round trip of an empty request (client spinning, server
//! polling), the first request after the server went to sleep (1 s idle), and a one-name walk.
//! The server runs in this process on its own thread, as it does in `nosefs mount`.
//!
//! `cargo run --release -p nosefs-daemon --example round_trip [-- ROUNDS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::namespace::{Fs, MountOptions};
use nosefs_daemon::client::Remote;
use nosefs_daemon::server::{Options, Server};
use nosefs_daemon::service::Service;

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

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = dir.path().join("img");
    let params = MkfsParams {
        image_bytes: 64 << 20,
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(&image, &params).unwrap();
    let fs = Arc::new(Fs::mount(&image, &MountOptions::default()).unwrap());
    let view = dir.path().join("view");
    std::fs::create_dir(&view).unwrap();
    let options = Options {
        allow_other: false,
        invalidate: None,
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
    let mut ns = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        client.nop().unwrap();
        ns.push(t.elapsed().as_nanos() as u64);
    }
    report("empty request, back to back", ns);
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
