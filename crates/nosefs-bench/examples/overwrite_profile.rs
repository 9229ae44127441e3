//! Profiling aid: random 1 KiB or 4 KiB overwrites with fsync on the native library, long enough
//! for `perf record` to see the steady state. `cargo run --release --example overwrite_profile -- 1024`.

use nosefs_bench::target::{cname, Native, Needs, Target};

fn main() -> std::io::Result<()> {
    let io: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4096);
    let file_bytes = 80u64 << 20;
    let needs = Needs {
        names: 1,
        data_bytes: file_bytes * 2,
    };
    let target =
        Native::new(std::path::Path::new("/dev/shm"), needs, Default::default()).expect("image");
    let file = target.open(target.root(), &cname("bench"), true)?;
    let chunk = vec![1u8; 1 << 20];
    for offset in (0..file_bytes).step_by(1 << 20) {
        target.pwrite(&file, offset, &chunk)?;
    }
    target.fsync(&file)?;
    let data = vec![2u8; io];
    let mut x = 88172645463325252u64;
    let start = std::time::Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs() < 6 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        target.pwrite(&file, x % (file_bytes - io as u64), &data)?;
        target.fsync(&file)?;
        n += 1;
    }
    println!(
        "{n} overwrites, {:.2} us each, {} pieces",
        start.elapsed().as_secs_f64() * 1e6 / n as f64,
        target.pieces(&file)
    );
    Ok(())
}
