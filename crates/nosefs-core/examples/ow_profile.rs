// Temporary profiling driver (not committed).
use nosefs_core::format::layout::MkfsParams;
use nosefs_core::namespace::{Fs, MountOptions, Owner, ROOT_INO};
fn main() {
    let size: usize = std::env::args().nth(1).map_or(1024, |s| s.parse().unwrap());
    let n: usize = std::env::args()
        .nth(2)
        .map_or(200_000, |s| s.parse().unwrap());
    let path = std::path::Path::new("/dev/shm/owprof.img");
    let params = MkfsParams {
        image_bytes: 1 << 30,
        prefault: true,
        ..Default::default()
    };
    nosefs_core::mkfs::mkfs(path, &params).unwrap();
    let fs = Fs::mount(
        path,
        &MountOptions {
            populate: true,
            ..Default::default()
        },
    )
    .unwrap();
    let a = fs
        .create(ROOT_INO, b"f", 0o644, Owner { uid: 0, gid: 0 }, true)
        .unwrap();
    let ino = a.ino;
    let file_bytes: u64 = 80 << 20;
    let chunk = vec![1u8; 1 << 20];
    for off in (0..file_bytes).step_by(1 << 20) {
        fs.write(ino, off, &chunk).unwrap();
    }
    fs.fsync(ino).unwrap();
    let buf = vec![7u8; size];
    let mut x: u64 = 88172645463325252;
    let t = std::time::Instant::now();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = x % (file_bytes - size as u64);
        fs.write(ino, off, &buf).unwrap();
        fs.fsync(ino).unwrap();
    }
    let el = t.elapsed();
    println!(
        "{size} B overwrite+fsync: {:.0} ns/op, pieces {}",
        el.as_nanos() as f64 / n as f64,
        fs.file_pieces(ino).unwrap()
    );
    std::fs::remove_file(path).unwrap();
}
