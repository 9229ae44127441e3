//! Pages ready before the first write: a mount of an image that is not populated asks for the
//! pages just ahead of where blocks are handed out, in the background, and no further.

mod common;

use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::{Owner, ROOT_INO};

const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

fn settled(fs: &Fs) -> u64 {
    let mut last = u64::MAX;
    for _ in 0..500 {
        let now = fs.populated_ahead_bytes();
        if now == last && now > 0 {
            return now;
        }
        last = now;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    last
}

#[test]
fn writes_have_the_pages_ahead_of_them_populated_and_no_more() {
    let t = common::fresh_image(256 << 20);
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let ino = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
    let block = vec![3u8; 4096];
    for k in 0..2048u64 {
        fs.write(ino, k * 4096, &block).unwrap();
        fs.fsync(ino).unwrap();
    }
    let populated = settled(&fs);
    assert!(populated > 0, "nothing was populated ahead");
    // What was written, plus at most two windows of 4 MiB per region (two CPUs' regions).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(
        populated <= (8 << 20) + cpus * (8 << 20),
        "populated {populated} bytes for 8 MiB of data"
    );
    let mut got = vec![0u8; 4096];
    fs.read(ino, 2047 * 4096, &mut got).unwrap();
    assert_eq!(got, block);
    drop(fs.unmount());
    // Mounted populated, nothing is asked for.
    let fs = Fs::mount(
        &t.path,
        &MountOptions {
            populate: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    fs.write(ino, 0, &block).unwrap();
    fs.fsync(ino).unwrap();
    assert_eq!(fs.populated_ahead_bytes(), 0);
    drop(fs.unmount());
}
