//! Mount time against image contents (issue: large images). Builds an image of N names in one
//! directory (a tenth of them with 100 bytes of data) through the native library, unmounts it
//! cleanly, then times mount and unmount, and reports the DRAM the mounted file system holds.
//!
//! `cargo run --release -p nosefs-bench --example mount_scale -- 100000 [IMAGE_SIZE_GIB]`
//!
//! With 0 names the image keeps mkfs's default table sizes: the mount time of an empty image.

use std::path::Path;
use std::time::Instant;

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::namespace::{Fs, MountOptions, Owner, ROOT_INO};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let names: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let gib: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let path = Path::new("/dev/shm/nosefs-mount-scale.img");
    let params = MkfsParams {
        image_bytes: gib << 30,
        pinodes: (names > 0).then_some(names + names / 5),
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(path, &params).expect("mkfs");
    let options = MountOptions::default();
    let fs = Fs::mount(path, &options).expect("mount");
    let owner = Owner { uid: 0, gid: 0 };
    let started = Instant::now();
    let data = [7u8; 100];
    for i in 0..names.saturating_sub(1) {
        let attr = fs
            .create(ROOT_INO, format!("f{i:08}").as_bytes(), 0o644, owner, true)
            .expect("create");
        if i % 10 == 0 {
            fs.write(attr.ino, 0, &data).expect("write");
        }
    }
    println!(
        "built {names} names in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    drop(fs.unmount());
    println!(
        "unmount (build session): {:.3} s",
        started.elapsed().as_secs_f64()
    );
    for round in 0..3 {
        let rss_before = rss_kib();
        let started = Instant::now();
        let fs = Fs::mount(path, &options).expect("mount");
        let mount_s = started.elapsed().as_secs_f64();
        let rss_after = rss_kib();
        let started = Instant::now();
        let mut listed = 0u64;
        fs.readdir(ROOT_INO, 0, |_| {
            listed += 1;
            true
        })
        .expect("readdir");
        let readdir_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        drop(fs.unmount());
        let unmount_s = started.elapsed().as_secs_f64();
        println!(
            "round {round}: mount {mount_s:.3} s, readdir of {listed} entries {readdir_s:.3} s, unmount {unmount_s:.3} s, \
             DRAM held after mount {:.0} bytes per name",
            (rss_after.saturating_sub(rss_before) * 1024) as f64 / names.max(1) as f64
        );
    }
    let _ = std::fs::remove_file(path);
}
