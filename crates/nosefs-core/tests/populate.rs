//! Pages ready before the first write: a mount of an image that is not populated asks for the
//! pages just ahead of where blocks are handed out, in the background, and no further.

mod common;

use common::OWNER;

use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::ROOT_INO;

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

/// On an image mapped without being populated, a file that overwrites its data reuses the
/// blocks its overwrites freed instead of moving on into fresh space (which costs a page fault
/// and memory per 4 KiB), so the data zone it touches stays near its size. A populated mount
/// keeps following the file's last block (appends always do).
#[test]
fn overwrites_reuse_the_space_they_free_before_fresh_space() {
    let touched = |populate: bool| {
        let t = common::fresh_image(64 << 20);
        let options = MountOptions {
            populate,
            ..MountOptions::default()
        };
        let fs = Fs::mount(&t.path, &options).unwrap();
        let f = fs.create(ROOT_INO, b"wal", 0o644, OWNER, true).unwrap().ino;
        let file_blocks = 64u64;
        fs.write(f, 0, &vec![1u8; (file_blocks * 4096) as usize])
            .unwrap();
        fs.fsync(f).unwrap();
        let before = fs.data_blocks_touched();
        // SQLite's write-ahead log: 4,120-byte frames rewritten from the start, each synced;
        // then whole pages at random.
        let mut x = 7u64;
        for k in 0..3000u64 {
            let (at, len) = if k < 1500 {
                (32 + k % 60 * 4120, 4120)
            } else {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) % file_blocks * 4096, 4096)
            };
            fs.write(f, at, &vec![(k % 251) as u8; len]).unwrap();
            fs.fsync(f).unwrap();
        }
        let grown = fs.data_blocks_touched() - before;
        drop(fs.unmount());
        grown
    };
    let lazily = touched(false);
    // 3,000 overwrites of 1-2 blocks each would otherwise reach ~4,500 blocks into fresh space;
    // a thread that moves to another CPU allocates from that CPU's region, where the file's
    // working set (64 blocks and what its overwrites free) may be touched once more.
    assert!(lazily <= 256, "{lazily} blocks of fresh space touched");
    let populated = touched(true);
    assert!(
        populated > 1000,
        "a populated image follows the file's last block: {populated}"
    );
}
