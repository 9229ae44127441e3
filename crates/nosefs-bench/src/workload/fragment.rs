//! `fragment`: sequential 1 MiB reads of a large file (against memory bandwidth), then random
//! page-aligned 4 KiB reads of it (a database's or a key-value store's point reads of a file
//! written once), and 1 MiB reads of a file before and after random 1 KiB overwrites have
//! fragmented it (seed 001 Fig. 9).

use std::io;

use super::{fill, offsets, Measured, Sizes};
use crate::runner::{combine_threads, parallel};
use crate::stats::median;
use crate::target::{cname, Target};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// Runs the three read phases (the fragmenting overwrites are untimed) with `threads` threads.
pub fn run_once<T: Target>(target: &T, threads: usize, sizes: &Sizes) -> io::Result<Vec<Measured>> {
    let counters = || target.counters();
    let seq_bytes = sizes.seq_read_mib * MIB;
    let frag_bytes = sizes.frag_mib * MIB;
    let per_thread = parallel(threads, |i, gate| {
        let mut buf = vec![0u8; MIB as usize];
        let seq = target.open(target.root(), &cname(&format!("seq{i:03}")), true)?;
        fill(target, &seq, seq_bytes)?;
        let seq_reads = (seq_bytes / MIB) as usize;
        let read_seq = gate.timed(&counters, seq_reads, |k| {
            target.pread(&seq, k as u64 * MIB, &mut buf)
        })?;
        let points = offsets(seq_reads * 64, seq_bytes, PAGE, 0xdef ^ i as u64);
        let read_random = gate.timed(&counters, points.len(), |k| {
            target.pread(&seq, points[k], &mut buf[..PAGE as usize])
        })?;
        target.close(seq)?;

        let frag = target.open(target.root(), &cname(&format!("frag{i:03}")), true)?;
        fill(target, &frag, frag_bytes)?;
        let frag_reads = (frag_bytes / MIB) as usize;
        let fresh = gate.timed(&counters, frag_reads, |k| {
            target.pread(&frag, k as u64 * MIB, &mut buf)
        })?;
        let small = vec![0x77u8; 1024];
        let at = offsets(
            sizes.frag_overwrites,
            frag_bytes - 1023,
            1,
            0xabc ^ i as u64,
        );
        for &offset in &at {
            target.pwrite(&frag, offset, &small)?;
            target.fsync(&frag)?;
        }
        let fragmented = gate.timed(&counters, frag_reads, |k| {
            target.pread(&frag, k as u64 * MIB, &mut buf)
        })?;
        target.close(frag)?;
        Ok(vec![read_seq, read_random, fresh, fragmented])
    })?;
    let variants = [
        ("read seq", format!("file={}MiB", sizes.seq_read_mib), MIB),
        (
            "read random",
            format!("file={}MiB", sizes.seq_read_mib),
            PAGE,
        ),
        ("read fresh", format!("file={}MiB", sizes.frag_mib), MIB),
        (
            "read fragmented",
            format!(
                "file={}MiB,overwrites={}",
                sizes.frag_mib, sizes.frag_overwrites
            ),
            MIB,
        ),
    ];
    Ok(variants
        .into_iter()
        .zip(combine_threads(per_thread))
        .map(|((op, variant, io_size), sample)| Measured {
            op: op.into(),
            io_size,
            variant,
            sample,
        })
        .collect())
}

/// Memory bandwidth of sequential 1 MiB copies through a buffer of `bytes`, in bytes per second
/// (median of 3): the ceiling for reads that copy from (persistent) memory.
pub fn memcpy_bytes_per_sec(bytes: u64) -> f64 {
    let source = vec![0x11u8; bytes as usize];
    let mut dest = vec![0u8; MIB as usize];
    let rates: Vec<f64> = (0..3)
        .map(|_| {
            let start = std::time::Instant::now();
            for chunk in source.chunks(MIB as usize) {
                dest[..chunk.len()].copy_from_slice(chunk);
                std::hint::black_box(&dest);
            }
            bytes as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    median(&rates)
}
