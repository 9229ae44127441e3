//! `dirops`: create, rename and unlink N files in one directory (seed 001, IV-B).

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::stats::{histogram, median, spread};
use crate::target::DirTarget;

/// The three timed phases.
pub const OPS: [&str; 3] = ["create", "rename", "unlink"];

/// One (target, op) result over all runs.
#[derive(Debug, Clone)]
pub struct OpResult {
    /// Target name.
    pub target: String,
    /// "create", "rename" or "unlink".
    pub op: &'static str,
    /// Files in the directory.
    pub files: usize,
    /// Median over runs of operations per second.
    pub ops_per_sec: f64,
    /// (max - min) / median of the per-run rates.
    pub spread: f64,
    /// Latency percentiles over all runs, in ns.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Mean latency of the last 1000 operations of the phase (the cost at full size), in ns.
    pub tail_mean_ns: f64,
    /// Flushes and fences per operation, where the target counts them.
    pub flushes_per_op: Option<f64>,
    /// Fences per operation.
    pub fences_per_op: Option<f64>,
    /// Runs measured.
    pub runs: usize,
}

struct Phase {
    rate: f64,
    hist: Histogram<u64>,
    tail_mean_ns: f64,
    flushes: Option<u64>,
    fences: Option<u64>,
}

fn time_phase(target: &dyn DirTarget, op: &str, n: usize) -> Phase {
    let mut hist = histogram();
    let mut latencies_tail = Vec::with_capacity(1000);
    let before = target.counters();
    let start = Instant::now();
    for i in 0..n {
        let t0 = Instant::now();
        match op {
            "create" => target.create(i),
            "rename" => target.rename(i),
            _ => target.unlink(i),
        }
        let ns = t0.elapsed().as_nanos() as u64;
        hist.saturating_record(ns.max(1));
        if i + 1000 >= n {
            latencies_tail.push(ns as f64);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let spent = target.counters().zip(before).map(|(a, b)| a.since(b));
    Phase {
        rate: n as f64 / elapsed,
        hist,
        tail_mean_ns: latencies_tail.iter().sum::<f64>() / latencies_tail.len().max(1) as f64,
        flushes: spent.map(|c| c.flushes),
        fences: spent.map(|c| c.fences),
    }
}

/// Runs create, rename and unlink of `n` files `runs` times on a target made fresh for each run.
pub fn run<T: DirTarget>(make: impl Fn() -> T, n: usize, runs: usize) -> Vec<OpResult> {
    let mut phases: Vec<Vec<Phase>> = (0..OPS.len()).map(|_| Vec::new()).collect();
    let mut name = String::new();
    for _ in 0..runs {
        let target = make();
        name = target.name();
        for (k, op) in OPS.iter().enumerate() {
            phases[k].push(time_phase(&target, op, n));
        }
    }
    OPS.iter()
        .zip(phases)
        .map(|(op, runs_of_op)| summarize(&name, op, n, &runs_of_op))
        .collect()
}

fn summarize(target: &str, op: &'static str, n: usize, phases: &[Phase]) -> OpResult {
    let rates: Vec<f64> = phases.iter().map(|p| p.rate).collect();
    let mut hist = histogram();
    for p in phases {
        hist.add(&p.hist).expect("same bounds");
    }
    let per_op = |v: Option<u64>| v.map(|c| c as f64 / n as f64);
    let total = |f: fn(&Phase) -> Option<u64>| {
        phases
            .iter()
            .map(f)
            .sum::<Option<u64>>()
            .map(|s| s / phases.len() as u64)
    };
    OpResult {
        target: target.into(),
        op,
        files: n,
        ops_per_sec: median(&rates),
        spread: spread(&rates),
        p50_ns: hist.value_at_quantile(0.50),
        p99_ns: hist.value_at_quantile(0.99),
        p999_ns: hist.value_at_quantile(0.999),
        tail_mean_ns: median(&phases.iter().map(|p| p.tail_mean_ns).collect::<Vec<_>>()),
        flushes_per_op: per_op(total(|p| p.flushes)),
        fences_per_op: per_op(total(|p| p.fences)),
        runs: phases.len(),
    }
}

/// The harness's own cost per timed operation: two clock reads and a histogram record around
/// nothing, in ns (median of 5 rounds of 100,000).
pub fn harness_cost_ns() -> f64 {
    let rounds: Vec<f64> = (0..5)
        .map(|_| {
            let mut hist = histogram();
            let start = Instant::now();
            for _ in 0..100_000 {
                let t0 = Instant::now();
                std::hint::black_box(());
                hist.saturating_record((t0.elapsed().as_nanos() as u64).max(1));
            }
            start.elapsed().as_nanos() as f64 / 100_000.0
        })
        .collect();
    median(&rounds)
}
