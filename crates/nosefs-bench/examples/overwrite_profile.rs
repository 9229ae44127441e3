//! Profiling aid: random 1 KiB or 4 KiB overwrites with fsync on the native library, long enough
//! for `perf record` to see the steady state; with a second argument, that many threads on one
//! image, each on a file of its own (what the fileops workload's thread sweep does), to find
//! what they share; with a third, that many overwrites per thread from the freshly written file
//! (the fileops phase's regime) instead of six seconds.
//! With `append` instead of a size, 4 KiB appends with fsync (the fileops append phase) instead,
//! `appendN` N-byte ones (`append138`: a db_bench log record), with write-backs and fences each;
//! with `aligned4096` (any size after `aligned`), overwrites at multiples of their size (the
//! fileops aligned-overwrite phase: database pages). With `wal`, SQLite's write-ahead log:
//! 4,120-byte frames (a 24-byte header and a 4 KiB page) one after another from byte 32, each
//! followed by fsync, the log overwritten from its start every 1,000 frames; `walsplit` writes
//! each frame as SQLite does, header and page apart.
//! With `fragread`, the `fragment` workload's last phase: the file fragmented by 1 KiB
//! overwrites (the third argument: how many, 100,000 by default), then 1 MiB reads of it for
//! six seconds.
//! `cargo run --release --example overwrite_profile -- 1024|aligned8192|append|wal|fragread [threads] [overwrites]`.

use nosefs_bench::target::{cname, Native, Needs, Target};

/// The overwritten file's size: 80 MiB, or `FILE_MIB` MiB from the environment (a larger file
/// keeps random page-aligned overwrites first rewrites of their page, which split an extent,
/// for longer).
fn file_bytes() -> u64 {
    std::env::var("FILE_MIB")
        .ok()
        .and_then(|m| m.parse::<u64>().ok())
        .map_or(80 << 20, |m| m << 20)
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    let append = first.as_deref().is_some_and(|a| a.starts_with("append"));
    let append_bytes: u64 = first
        .as_deref()
        .and_then(|a| a.strip_prefix("append")?.parse().ok())
        .unwrap_or(4096);
    let wal = first.as_deref().is_some_and(|a| a.starts_with("wal"));
    let fragread = first.as_deref() == Some("fragread");
    let split = first.as_deref() == Some("walsplit");
    let aligned = first.as_deref().is_some_and(|a| a.starts_with("aligned"));
    let io: usize = first
        .and_then(|a| a.trim_start_matches("aligned").parse().ok())
        .unwrap_or(4096);
    let threads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let count: Option<u64> = args.next().and_then(|a| a.parse().ok());
    let needs = Needs {
        names: threads,
        data_bytes: threads
            * if append {
                (count.unwrap_or(0) * append_bytes.next_multiple_of(64)).max(file_bytes()) * 5 / 4
            } else {
                file_bytes() * 2
            },
    };
    let target =
        Native::new(std::path::Path::new("/dev/shm"), needs, Default::default()).expect("image");
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..threads)
            .map(|t| {
                let target = &target;
                s.spawn(move || {
                    if fragread {
                        fragmented_reads(target, t, count)
                    } else if append {
                        append_all(target, t, count, append_bytes)
                    } else if wal {
                        wal_frames(target, t, count, split)
                    } else {
                        overwrite(target, t, io, aligned, count)
                    }
                })
            })
            .collect();
        runs.into_iter()
            .try_for_each(|r| r.join().expect("no panic"))
    })
}

fn overwrite(
    target: &Native,
    thread: u64,
    io: usize,
    aligned: bool,
    count: Option<u64>,
) -> std::io::Result<()> {
    let file = target.open(target.root(), &cname(&format!("bench{thread}")), true)?;
    let chunk = vec![1u8; 1 << 20];
    for offset in (0..file_bytes()).step_by(1 << 20) {
        target.pwrite(&file, offset, &chunk)?;
    }
    target.fsync(&file)?;
    let data = vec![2u8; io];
    let mut x = 88172645463325252u64 + thread;
    // For a profiler to attach once the file is written (`perf record -p` after this line).
    eprintln!("thread {thread}: file written, overwriting");
    let start = std::time::Instant::now();
    let mut n = 0u64;
    let mut latencies_ns: Vec<u32> = Vec::new();
    while count.map_or(start.elapsed().as_secs() < 6, |c| n < c) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = if aligned {
            x % (file_bytes() / io as u64) * io as u64
        } else {
            x % (file_bytes() - io as u64)
        };
        let op_start = std::time::Instant::now();
        target.pwrite(&file, at, &data)?;
        target.fsync(&file)?;
        latencies_ns.push(op_start.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        n += 1;
    }
    let elapsed = start.elapsed();
    latencies_ns.sort_unstable();
    let at = |q: f64| latencies_ns[((latencies_ns.len() - 1) as f64 * q) as usize];
    println!(
        "thread {thread}: {n} overwrites, {:.2} us each (p50 {} ns, p99 {} ns, p99.9 {} ns), {} pieces",
        elapsed.as_secs_f64() * 1e6 / n as f64,
        at(0.5),
        at(0.99),
        at(0.999),
        target.pieces(&file)
    );
    Ok(())
}

fn wal_frames(
    target: &Native,
    thread: u64,
    count: Option<u64>,
    split: bool,
) -> std::io::Result<()> {
    const FRAME_BYTES: u64 = 4120;
    const FRAMES: u64 = 1000;
    let file = target.open(target.root(), &cname(&format!("bench{thread}")), true)?;
    let frame = vec![1u8; FRAME_BYTES as usize];
    target.pwrite(&file, 0, &[0u8; 32])?;
    for k in 0..FRAMES {
        target.pwrite(&file, 32 + k * FRAME_BYTES, &frame)?;
    }
    target.fsync(&file)?;
    let count = count.unwrap_or(1_000_000);
    eprintln!("thread {thread}: log written, overwriting it frame by frame");
    let start = std::time::Instant::now();
    for k in 0..count {
        let at = 32 + k % FRAMES * FRAME_BYTES;
        if split {
            // As SQLite writes a frame: its 24-byte header, then the page.
            target.pwrite(&file, at, &frame[..24])?;
            target.pwrite(&file, at + 24, &frame[24..])?;
        } else {
            target.pwrite(&file, at, &frame)?;
        }
        target.fsync(&file)?;
    }
    println!(
        "thread {thread}: {count} frames, {:.2} us each, {} pieces",
        start.elapsed().as_secs_f64() * 1e6 / count as f64,
        target.pieces(&file)
    );
    Ok(())
}

fn append_all(target: &Native, thread: u64, count: Option<u64>, bytes: u64) -> std::io::Result<()> {
    let file = target.open(target.root(), &cname(&format!("bench{thread}")), true)?;
    let record = vec![1u8; bytes as usize];
    let count = count.unwrap_or(file_bytes() / bytes);
    // For a profiler to attach once the image is mapped (`perf record -p` after this line).
    eprintln!("thread {thread}: image ready, appending (not overwriting)");
    let before = nosefs_core::pmem::counters();
    let start = std::time::Instant::now();
    for k in 0..count {
        target.pwrite(&file, k * bytes, &record)?;
        target.fsync(&file)?;
    }
    let elapsed = start.elapsed();
    let after = nosefs_core::pmem::counters();
    println!(
        "thread {thread}: {count} appends of {bytes} bytes, {:.2} us each, {:.2} write-backs and {:.2} fences each, {} pieces",
        elapsed.as_secs_f64() * 1e6 / count as f64,
        (after.flushes - before.flushes) as f64 / count as f64,
        (after.fences - before.fences) as f64 / count as f64,
        target.pieces(&file)
    );
    Ok(())
}

fn fragmented_reads(target: &Native, thread: u64, count: Option<u64>) -> std::io::Result<()> {
    const MIB: u64 = 1 << 20;
    let file = target.open(target.root(), &cname(&format!("bench{thread}")), true)?;
    let chunk = vec![1u8; MIB as usize];
    for offset in (0..file_bytes()).step_by(MIB as usize) {
        target.pwrite(&file, offset, &chunk)?;
    }
    target.fsync(&file)?;
    let mut buf = vec![0u8; MIB as usize];
    let fresh_start = std::time::Instant::now();
    for k in 0..file_bytes() / MIB {
        target.pread(&file, k * MIB, &mut buf)?;
    }
    let fresh_us = fresh_start.elapsed().as_secs_f64() * 1e6 / (file_bytes() / MIB) as f64;
    let small = vec![2u8; 1024];
    let mut x = 88172645463325252u64 + thread;
    for _ in 0..count.unwrap_or(100_000) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        target.pwrite(&file, x % (file_bytes() - 1023), &small)?;
        target.fsync(&file)?;
    }
    eprintln!("thread {thread}: fragmented by overwriting, reading");
    let start = std::time::Instant::now();
    let mut reads = 0u64;
    // With `AGAIN`, each MiB is read twice in a row and only the second read counts: the
    // pieces' bytes then come from the cache, which separates memory from the read's own work.
    let again = std::env::var_os("AGAIN").is_some();
    let mut timed_ns = 0u128;
    while start.elapsed().as_secs() < 6 {
        let at = reads % (file_bytes() / MIB) * MIB;
        if again {
            target.pread(&file, at, &mut buf)?;
        }
        let t = std::time::Instant::now();
        target.pread(&file, at, &mut buf)?;
        timed_ns += t.elapsed().as_nanos();
        reads += 1;
    }
    println!(
        "thread {thread}: {reads} reads of 1 MiB, {:.1} us each (the fresh file: {fresh_us:.1} us), {} pieces",
        timed_ns as f64 / 1e3 / reads as f64,
        target.pieces(&file)
    );
    Ok(())
}
