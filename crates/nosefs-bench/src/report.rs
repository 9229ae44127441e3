//! Reports: the terminal (markdown) table, the JSON records and the markdown report.

use std::fmt::Write as _;

use serde::Serialize;

use crate::suite::{Outcome, Record};

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// NUMA nodes.
    pub numa_nodes: usize,
    /// Kernel release.
    pub kernel: String,
    /// Physical memory in GiB.
    pub memory_gib: f64,
    /// The cache-line write-back instruction noseFS uses here.
    pub flush: String,
}

impl Machine {
    /// Describes this machine.
    pub fn this() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, m)| m.trim().to_string());
        let memory_kib: f64 = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Machine {
            cpu_model,
            cpus: crate::runner::cpu_order().len(),
            numa_nodes: crate::runner::numa_nodes(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            memory_gib: memory_kib / (1024.0 * 1024.0),
            flush: format!("{:?}", nosefs_core::pmem::FlushKind::from_env_or_detect()),
        }
    }
}

/// The ratio of `r` to the same point on `baseline`, if measured.
pub fn ratio(records: &[Record], r: &Record, baseline: &str) -> Option<f64> {
    records
        .iter()
        .find(|b| b.target == baseline && b.same_point(r))
        .map(|b| r.ops_per_sec / b.ops_per_sec)
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn size(bytes: u64) -> String {
    match bytes {
        0 => "-".into(),
        b if b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b % 1024 == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// A markdown table of every record, one section per workload, with ratios to `baseline`.
pub fn table(records: &[Record], baseline: &str) -> String {
    let mut out = String::new();
    let mut workloads: Vec<&str> = records.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for workload in workloads {
        let _ = writeln!(out, "\n### {workload}\n");
        let _ = writeln!(
            out,
            "| target | op | variant | threads | io | ops/s | MB/s | spread | p50 ns | p99 ns | p99.9 ns | x {baseline} | flushes/op | fences/op |"
        );
        let _ = writeln!(
            out,
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let mut rows: Vec<&Record> = records.iter().filter(|r| r.workload == workload).collect();
        // Group the targets of one point together, in the order the points were measured.
        let key = |r: &Record| {
            records
                .iter()
                .position(|first| first.same_point(r))
                .expect("r itself matches")
        };
        rows.sort_by_key(|r| key(r));
        for r in rows {
            let _ =
                writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.0} | {} | {:.1}% | {} | {} | {} | {} | {} | {} |",
                r.target,
                r.op,
                if r.variant.is_empty() { "-" } else { &r.variant },
                r.threads,
                size(r.io_size),
                r.ops_per_sec,
                if r.mb_per_sec == 0.0 {
                    "-".into()
                } else {
                    format!("{:.0}", r.mb_per_sec)
                },
                r.spread * 100.0,
                r.p50_ns,
                r.p99_ns,
                r.p999_ns,
                opt(ratio(records, r, baseline)),
                opt(r.flushes_per_op),
                opt(r.fences_per_op),
            );
        }
    }
    out
}

/// The records as a JSON array.
pub fn json(records: &[Record]) -> String {
    serde_json::to_string_pretty(records).expect("records serialize")
}

/// Notes under the table: harness cost, memory bandwidth, what was skipped.
pub fn notes(outcome: &Outcome) -> String {
    let mut out = String::new();
    let h = outcome.harness;
    let _ = writeln!(
        out,
        "harness cost per timed operation: {:.0} ns, {:.1}% of a tmpfs 4 KiB pwrite ({:.0} ns){}",
        h.empty_op_ns,
        100.0 * h.fraction(),
        h.tmpfs_pwrite_4k_ns,
        if h.fraction() < 0.05 {
            ""
        } else {
            " -- above the 5% the method allows"
        }
    );
    let _ = writeln!(out, "{}", outcome.wakeup_latency);
    if let Some(memcpy) = outcome.memcpy_bytes_per_sec {
        let _ = writeln!(
            out,
            "memcpy bandwidth (1 MiB copies): {:.2} GB/s",
            memcpy / 1e9
        );
        for r in outcome.records.iter().filter(|r| r.op == "read seq") {
            let _ = writeln!(
                out,
                "{} ({} threads): sequential 1 MiB reads at {:.0}% of memcpy",
                r.target,
                r.threads,
                100.0 * r.mb_per_sec * 1e6 / memcpy
            );
        }
        for fresh in outcome.records.iter().filter(|r| r.op == "read fresh") {
            let fragmented = outcome.records.iter().find(|r| {
                r.op == "read fragmented" && r.target == fresh.target && r.threads == fresh.threads
            });
            if let Some(f) = fragmented {
                let _ = writeln!(
                    out,
                    "{} ({} threads): reads of the fragmented file at {:.2}x the fresh file's speed",
                    f.target,
                    f.threads,
                    f.ops_per_sec / fresh.ops_per_sec
                );
            }
        }
    }
    for s in &outcome.skipped {
        let what = match (&s.workload, s.threads) {
            (Some(w), Some(t)) => format!("{} {w} with {t} thread(s)", s.target),
            (Some(w), None) => format!("{} {w}", s.target),
            _ => s.target.clone(),
        };
        let _ = writeln!(out, "not run: {what}: {}", s.reason);
    }
    out
}

/// The markdown report written by `--out`.
pub fn markdown(outcome: &Outcome, baseline: &str, command: &str, plots: &[String]) -> String {
    let m = Machine::this();
    let mut out = String::new();
    let _ = writeln!(out, "# nosefs bench report\n");
    let _ = writeln!(out, "Command: `{command}`\n");
    let _ = writeln!(
        out,
        "Machine: {} ({} CPUs, {} NUMA node(s), {:.0} GiB), Linux {}, flush instruction {}.\n",
        m.cpu_model, m.cpus, m.numa_nodes, m.memory_gib, m.kernel, m.flush
    );
    let _ = writeln!(
        out,
        "Rates are medians over runs, all threads together; spread is (max - min) / median of the \
         per-run rates; latencies are percentiles of every operation of every run; `x {baseline}` \
         is the ratio of ops/s to the same point on {baseline}; flushes and fences are counted by \
         noseFS's own targets only.\n"
    );
    for line in notes(outcome).lines() {
        let _ = writeln!(out, "- {line}");
    }
    if crate::matrix::has_cells(&outcome.records) {
        out.push_str(&crate::matrix::section(&outcome.records, &outcome.skipped));
        let _ = writeln!(out, "\n## All results");
    }
    out.push_str(&table(&outcome.records, baseline));
    if !plots.is_empty() {
        let _ = writeln!(out, "\n## Plots\n");
        for plot in plots {
            let _ = writeln!(out, "![{plot}]({plot})\n");
        }
    }
    out
}
