//! Profiling aid: heap allocations per name operation of the native library (create, lookup,
//! getattr, link, rename, unlink) and per vfs path walk, counted by a global allocator that
//! wraps the system's. Each allocation is a malloc and a free on the operation's path (a tenth of
//! a namespace operation through the shim, in a profile of link and unlink, was malloc and
//! free).
//! `cargo run --release --example alloc_count -p nosefs-bench -- [names]`.

// A global allocator is an `unsafe` trait: this profiling aid's one exception, a counter
// around the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::perm::Cred;
use nosefs_core::namespace::{Owner, RenameFlags, ROOT_INO};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Runs `op` for each of `n` names and prints the allocations per call.
fn per_call(what: &str, n: u64, mut op: impl FnMut(u64)) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for i in 0..n {
        op(i);
    }
    let count = ALLOCATIONS.load(Ordering::Relaxed) - before;
    println!(
        "{what:>10}: {:.2} allocations per call",
        count as f64 / n as f64
    );
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir_in("/dev/shm").expect("/dev/shm");
    let image = dir.path().join("image");
    let params = MkfsParams {
        image_bytes: 256 << 20,
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(&image, &params).expect("mkfs");
    let fs = Fs::mount(&image, &MountOptions::default()).expect("mount");
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, OWNER).expect("mkdir").ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, OWNER).expect("mkdir").ino;
    let name = |i: u64| format!("file{i}").into_bytes();
    let names: Vec<Vec<u8>> = (0..n).map(name).collect();
    let mut inos = Vec::with_capacity(n as usize);
    per_call("create", n, |i| {
        inos.push(
            fs.create(a, &names[i as usize], 0o644, OWNER, true)
                .expect("create")
                .ino,
        )
    });
    per_call("lookup", n, |i| {
        fs.lookup(a, &names[i as usize]).expect("lookup");
    });
    per_call("getattr", n, |i| {
        fs.getattr(inos[i as usize]).expect("getattr");
    });
    per_call("link", n, |i| {
        fs.link(inos[i as usize], b, &names[i as usize])
            .expect("link");
    });
    let cred = Cred::root();
    let paths: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("/m/b/file{i}").into_bytes())
        .collect();
    // The walk takes its path by value: one of these allocations is the caller's copy.
    per_call("walk", n, |i| {
        nosefs_core::vfs::walk::walk(&fs, &cred, b"/m", paths[i as usize].clone(), true)
            .expect("walk");
    });
    per_call("unlink", n, |i| {
        fs.unlink(b, &names[i as usize]).expect("unlink");
    });
    let renamed: Vec<Vec<u8>> = (0..n).map(|i| format!("moved{i}").into_bytes()).collect();
    per_call("rename", n, |i| {
        fs.rename(
            a,
            &names[i as usize],
            b,
            &renamed[i as usize],
            RenameFlags::default(),
        )
        .expect("rename");
    });
}
