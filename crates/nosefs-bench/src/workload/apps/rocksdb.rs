//! `rocksdb`: RocksDB through its own benchmark, `db_bench` (Debian's rocksdb-tools), as its
//! users run it: default options (100-byte values, Snappy, a 64 MiB memtable, an 8 MiB block
//! cache), every write synced (`--sync=1`: RocksDB appends the write to its write-ahead log and
//! syncs it before it returns). One process runs `fillseq` (N keys in order), `overwrite` (N
//! random keys of those), then flushes the memtable to a table file and compacts (untimed), and
//! `readrandom` (10 N random reads through the block cache and, for what it misses, `pread`s of
//! the table file); a second process then opens the store and must find every key. N is ten
//! times the application workloads' operation count.
//!
//! db_bench times each operation itself and prints a histogram of the latencies in microsecond
//! buckets (`--histogram=1`); the rates here are its own (operations over its measured time) and
//! the percentiles are the upper edges of its buckets (1, 2, 3, 4, 6, 10, 15, 22 µs...), the
//! resolution it reports.

use std::io;

use super::{checked, installed, path_arg, timed, Measured, Place};

const DB_BENCH: &str = "/usr/bin/db_bench";

/// db_bench's benchmarks, in order: the timed phases and, between them, the memtable's flush
/// and a compaction, so that the reads find the keys in a table file.
const BENCHMARKS: &str = "fillseq,overwrite,flush,compact,readrandom";

/// The timed phases, with the operation names reported.
const PHASES: [(&str, &str); 3] = [
    ("fillseq", "fillseq-sync"),
    ("overwrite", "overwrite-sync"),
    ("readrandom", "readrandom"),
];

/// Value size, db_bench's default.
const VALUE_BYTES: u64 = 100;

/// The `rocksdb` workload.
pub(super) fn run(place: &Place, ops: usize) -> io::Result<Vec<Measured>> {
    installed(&[DB_BENCH])?;
    let dir = place.dir.join("rocksdb");
    let db = format!("--db={}", path_arg(&dir)?);
    let keys = ops * 10;
    let mut c = place.command(DB_BENCH);
    c.args([
        db.as_str(),
        &format!("--num={keys}"),
        &format!("--reads={}", keys * 10),
        &format!("--benchmarks={BENCHMARKS}"),
        "--sync=1",
        "--histogram=1",
        "--threads=1",
        "--seed=1",
    ]);
    let result = checked(c, "db_bench").and_then(|out| {
        let measured = PHASES
            .iter()
            .map(|&(name, op)| phase(&out, name, op))
            .collect::<io::Result<Vec<_>>>()?;
        check(place, &db, keys)?;
        Ok(measured)
    });
    place.run("rm", &["-rf".as_ref(), dir.as_os_str()])?;
    result
}

/// A second process reads the keys back: a scan must find `keys` entries (fillseq wrote keys
/// 0..`keys`, and nothing else), and random reads must find every key they ask for.
fn check(place: &Place, db: &str, keys: usize) -> io::Result<()> {
    let mut c = place.command(DB_BENCH);
    c.args([
        db,
        &format!("--num={keys}"),
        &format!("--reads={keys}"),
        "--benchmarks=readseq,readrandom",
        "--use_existing_db=1",
        "--threads=1",
    ]);
    let out = checked(c, "db_bench's check")?;
    let scanned = lines(&out)
        .find(|l| is_summary(l, "readseq"))
        .and_then(summary_figures)
        .map(|(_, count)| count);
    let found = lines(&out)
        .find(|l| is_summary(l, "readrandom"))
        .unwrap_or("no readrandom line");
    let want = format!("({keys} of {keys} found)");
    if scanned != Some(keys as u64) || !found.contains(&want) {
        return Err(io::Error::other(format!(
            "RocksDB lost data: a second process scanned {scanned:?} of {keys} keys, and its \
             readrandom says {found:?}, expected {want}"
        )));
    }
    Ok(())
}

/// db_bench's lines: it ends its progress reports with a carriage return.
fn lines(out: &str) -> impl Iterator<Item = &str> {
    out.split(['\n', '\r']).map(str::trim)
}

/// The measurement of benchmark `name` in db_bench's output, reported as operation `op`.
fn phase(out: &str, name: &str, op: &str) -> io::Result<Measured> {
    let missing = |what: &str| io::Error::other(format!("db_bench printed no {what} for {name}"));
    let mut lines = lines(out).skip_while(|l| !is_summary(l, name));
    let summary = lines.next().ok_or_else(|| missing("summary"))?;
    let (micros_per_op, count) = summary_figures(summary).ok_or_else(|| missing("rate"))?;
    let mut latencies_ns = Vec::with_capacity(count as usize);
    for line in lines
        .skip_while(|l| !l.starts_with('(') && !l.starts_with('['))
        .take_while(|l| l.starts_with('(') || l.starts_with('['))
    {
        let (upper_us, n) = bucket(line).ok_or_else(|| missing("histogram"))?;
        latencies_ns.extend(std::iter::repeat(upper_us * 1000).take(n as usize));
    }
    if latencies_ns.len() as u64 != count {
        return Err(io::Error::other(format!(
            "db_bench's histogram for {name} counts {} operations, its summary {count}",
            latencies_ns.len()
        )));
    }
    let elapsed_ns = (micros_per_op * 1000.0 * count as f64) as u64;
    timed(op, "db_bench", VALUE_BYTES, elapsed_ns, &latencies_ns)
}

/// Whether `line` is benchmark `name`'s summary: `fillseq      :   4.386 micros/op ...`.
fn is_summary(line: &str, name: &str) -> bool {
    line.split_once(':')
        .is_some_and(|(head, rest)| head.trim() == name && rest.contains("micros/op"))
}

/// Microseconds per operation and operations, from a summary line (`...: 4.386 micros/op 227839
/// ops/sec 0.088 seconds 20000 operations; ...`).
fn summary_figures(line: &str) -> Option<(f64, u64)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let before = |unit: &str| {
        let at = words.iter().position(|w| w.trim_end_matches(';') == unit)?;
        words.get(at.checked_sub(1)?).copied()
    };
    let micros = before("micros/op")?.parse().ok()?;
    let count = before("operations")?.parse().ok()?;
    Some((micros, count))
}

/// A histogram line's upper edge (µs) and count: `(       1,       2 ]      860   4.300% ...`.
fn bucket(line: &str) -> Option<(u64, u64)> {
    let (edges, rest) = line.split_once(']')?;
    let upper = edges.split(',').nth(1)?.trim().parse().ok()?;
    let count = rest.split_whitespace().next()?.parse().ok()?;
    Some((upper, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from db_bench 7.8.3's output (progress reports end with a carriage return).
    const OUTPUT: &str = "\
... finished 100 ops                              \r... finished 200 ops      \r\
DB path: [/dev/shm/rk]
fillseq      :       4.000 micros/op 250000 ops/sec 0.004 seconds 1000 operations;   25.2 MB/s
Microseconds per write:
Count: 1000 Average: 4.0  StdDev: 1.2
Percentiles: P50: 2.63 P75: 2.97 P99: 5.72 P99.9: 24.00 P99.99: 51.00
------------------------------------------------------
(       1,       2 ]      100  10.000%  10.000% ##
(       2,       3 ]      850  85.000%  95.000% #################
(      22,      34 ]       50   5.000% 100.000% #

DB path: [/dev/shm/rk]
readrandom   :       0.744 micros/op 1340123 ops/sec 0.001 seconds 2 operations;    0.1 MB/s (2 of 2 found)

Microseconds per read:
Count: 2 Average: 0.7497  StdDev: 1.81
------------------------------------------------------
[       0,       1 ]        2 100.000% 100.000% ####################
";

    #[test]
    fn a_phase_is_read_from_its_summary_and_histogram() {
        let m = phase(OUTPUT, "fillseq", "fillseq-sync").unwrap();
        assert_eq!((m.op.as_str(), m.sample.ops), ("fillseq-sync", 1000));
        assert_eq!(m.sample.elapsed_ns, 4_000_000);
        assert!((3000..3010).contains(&m.sample.hist.value_at_quantile(0.5)));
        assert!(m.sample.hist.value_at_quantile(0.99) >= 34_000);
        let m = phase(OUTPUT, "readrandom", "readrandom").unwrap();
        assert_eq!(m.sample.ops, 2);
    }

    #[test]
    fn a_missing_phase_or_a_histogram_that_disagrees_is_an_error() {
        assert!(phase(OUTPUT, "overwrite", "overwrite-sync").is_err());
        let short = OUTPUT.replace("850  85.000%", "849  85.000%");
        assert!(phase(&short, "fillseq", "fillseq-sync").is_err());
    }
}
