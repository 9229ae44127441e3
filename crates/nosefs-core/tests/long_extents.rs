//! File data in extents longer than a commit's checksum may cover: commits that cut or grow
//! them checksum only the bytes they wrote (docs/format.md, "Commit protocol", step 3).

mod common;

use common::OWNER;
use nosefs_core::format::layout::MkfsParams;
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::ROOT_INO;

/// A 1 KiB overwrite into a 72 MiB extent commits the extent's first part as a move (a cut) and
/// its rest as a new extent over the same bytes: the checksum covers the 1 KiB, not the rest
/// (over the 64 MiB a recovery would check, the commit could not be made).
#[test]
fn a_small_write_into_a_long_extent_checksums_only_itself() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("long.img");
    let params = MkfsParams {
        image_bytes: 96 << 20,
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(&path, &params).unwrap();
    let fs = Fs::mount(&path, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
    let chunk = vec![7u8; 1 << 20];
    for i in 0..72u64 {
        fs.write(f, i << 20, &chunk).unwrap();
    }
    fs.fsync(f).unwrap();
    fs.write(f, 1000, &[9; 1024]).unwrap();
    fs.fsync(f).unwrap();
    fs.write(f, 5000, &[8; 100]).unwrap();
    fs.fsync(f).unwrap();
    drop(fs); // a crash: no unmount
    let fs = Fs::mount(&path, &MountOptions::default()).unwrap();
    let mut buf = vec![0u8; 8192];
    fs.read(f, 0, &mut buf).unwrap();
    assert!(buf[..1000].iter().all(|&b| b == 7));
    assert!(buf[1000..2024].iter().all(|&b| b == 9));
    assert!(buf[2024..5000].iter().all(|&b| b == 7));
    assert!(buf[5000..5100].iter().all(|&b| b == 8));
    assert!(buf[5100..].iter().all(|&b| b == 7));
    drop(fs.unmount());
    let report = nosefs_core::fsck::fsck(&path, Default::default()).unwrap();
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
}
