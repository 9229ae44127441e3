//! Mount time against image contents (issue: large images). Builds an image of N names in one
//! directory (a tenth of them with 100 bytes of data) through the native library, unmounts it
//! cleanly, then times mount, readdir and unmount, reports the heap the mounted file system
//! holds, times `fsck` and `info`'s usage scan, and checks what it times: every name listed, the
//! data read back, fsck clean. It exits non-zero if a check fails (CI runs it with 10^6 names).
//!
//! `cargo run --release -p nosefs-bench --example mount_scale -- 100000 [IMAGE_SIZE_GIB]`
//!
//! With 0 names the image keeps mkfs's default table sizes: the mount time of an empty image.

use std::path::Path;
use std::time::Instant;

use nosefs_bench::sys::{live_heap_bytes, CountingAllocator};

/// DRAM the mounted file system may hold per name, in bytes (issue 23), checked from 10^6 names
/// on (below that, fixed costs dominate).
const HEAP_PER_NAME_BUDGET: f64 = 200.0;
use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::{Owner, ROOT_INO};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

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
    let owner = Owner {
        uid: 0,
        gid: 0,
        umask: 0,
    };
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
        let heap_before = live_heap_bytes();
        let started = Instant::now();
        let fs = Fs::mount(path, &options).expect("mount");
        let mount_s = started.elapsed().as_secs_f64();
        let heap_after = live_heap_bytes();
        let started = Instant::now();
        let mut listed = 0u64;
        fs.readdir(ROOT_INO, 0, |_| {
            listed += 1;
            true
        })
        .expect("readdir");
        let readdir_s = started.elapsed().as_secs_f64();
        // Every name and ".", "..".
        assert_eq!(
            listed,
            names.saturating_sub(1) + 2,
            "readdir lists every name"
        );
        if names > 1 {
            let mut buf = [0u8; 128];
            let ino = fs.lookup(ROOT_INO, b"f00000000").expect("lookup").ino;
            let read = fs.read(ino, 0, &mut buf).expect("read");
            assert_eq!(&buf[..read], &data[..], "the data survives the remount");
        }
        let started = Instant::now();
        drop(fs.unmount());
        let unmount_s = started.elapsed().as_secs_f64();
        let heap_per_name = heap_after.saturating_sub(heap_before) as f64 / names.max(1) as f64;
        println!(
            "round {round}: mount {mount_s:.3} s, readdir of {listed} entries {readdir_s:.3} s, unmount {unmount_s:.3} s, \
             heap held by the mounted file system {heap_per_name:.0} bytes per name"
        );
        // The budget. A count of allocations, not a time: the same on every machine.
        if names >= 1_000_000 {
            assert!(
                heap_per_name < HEAP_PER_NAME_BUDGET,
                "{heap_per_name:.0} bytes of heap per name, over the budget of {HEAP_PER_NAME_BUDGET}"
            );
        }
    }
    let started = Instant::now();
    let report =
        nosefs_core::fsck::fsck(path, nosefs_core::fsck::FsckOptions::default()).expect("fsck");
    let fsck_s = started.elapsed().as_secs_f64();
    assert!(report.problems.is_empty(), "fsck: {:?}", report.problems);
    let started = Instant::now();
    let image =
        nosefs_core::image::Image::open(path, nosefs_core::pmem::Access::ReadOnly).expect("open");
    let usage = nosefs_core::info::Usage::scan(&image);
    println!(
        "fsck (clean) {fsck_s:.3} s, info's usage scan {:.3} s ({} pinodes in use)",
        started.elapsed().as_secs_f64(),
        usage.pinodes_used
    );
    let _ = std::fs::remove_file(path);
}
