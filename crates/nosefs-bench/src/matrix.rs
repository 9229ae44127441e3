//! The seed-000-style file-system matrix (`nosefs bench --matrix`): every target against every
//! macro workload, one number per cell (the workload's overall flowop rate, the `all` row),
//! normalized to the best target of each column, as a table and as grouped bar charts.
//!
//! Seed 000 reports each file system's Filebench ops/s per workload, and its application
//! workloads beside them; here the same comparison is made from the records of one run, so that
//! every cell was measured side by side with the others. Application workloads given with
//! `--matrix` (`--workload oltp` ...) add a column per headline operation (`APP_HEADLINES`:
//! transactions or operations per second; for the tools, steps per second).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::suite::{Record, Skipped};

/// The targets `--matrix` runs, in report order: noseFS first, then the baselines.
pub fn targets() -> Vec<String> {
    let mut targets = vec!["nosefs".to_string(), "nosefs-fuse".into(), "tmpfs".into()];
    targets.extend(
        crate::scratch::RamdiskKind::ALL
            .iter()
            .map(|k| format!("ramdisk:{}", k.name())),
    );
    targets
}

/// The workloads `--matrix` runs: seed 000's three personalities, seed 001's varmail, and
/// webproxy at the three directory depths of seed 000 Fig. 3.
pub const WORKLOADS: [&str; 4] = ["fileserver", "varmail", "webserver", "webproxy-depths"];

/// The application workloads' operations that become matrix columns, one per variant (a
/// database, a store, a journal mode): the rest of their rows stay in the workload's own table.
pub const APP_HEADLINES: [(&str, &str); 10] = [
    ("oltp", "tpcb"),
    ("oltp", "tpcc"),
    ("oltp", "oltp-read-write"),
    ("kv", "ycsb-a"),
    ("kv", "ycsb-b"),
    ("redis", "set"),
    ("sqlite", "insert"),
    ("tools", "git-clone"),
    ("tools", "make"),
    ("tools", "rsync"),
];

/// Whether `r` is a cell of the matrix, and its column's heading: a macro workload's overall
/// rate (headed by the workload), or an application's headline operation (headed by the
/// operation and the variant's first word: `tpcc pgbench`, `ycsb-a leveldb`).
fn heading(r: &Record) -> Option<String> {
    if r.op == "all" {
        return Some(r.workload.clone());
    }
    APP_HEADLINES
        .iter()
        .any(|&(w, op)| r.workload == w && r.op == op)
        .then(|| match r.variant.split([' ', ',']).next() {
            Some(first) if !first.is_empty() => format!("{} {first}", r.op),
            _ => r.op.clone(),
        })
}

/// Whether `records` make a matrix: a macro workload's or an application's headline rows.
pub fn has_cells(records: &[Record]) -> bool {
    records.iter().any(|r| heading(r).is_some())
}

/// One column of the matrix: a workload, and the variant when the workload ran several.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// The workload.
    pub workload: String,
    /// The operation: `all` for a macro workload, the headline operation of an application.
    pub op: String,
    /// Its variant (files, depth, I/O size).
    pub variant: String,
    /// The heading: the workload, with its depth when it ran at several.
    pub label: String,
}

/// The matrix for one thread count.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// Threads.
    pub threads: usize,
    /// Columns in measurement order.
    pub columns: Vec<Column>,
    /// Targets in measurement order.
    pub targets: Vec<String>,
    /// `cells[target][column]`: overall ops/s, where the target ran the workload.
    pub cells: Vec<Vec<Option<f64>>>,
}

impl Column {
    fn matches(&self, r: &Record) -> bool {
        self.workload == r.workload && self.op == r.op && self.variant == r.variant
    }
}

fn depth_of(variant: &str) -> Option<&str> {
    variant.split(',').find_map(|kv| kv.strip_prefix("depth="))
}

impl Matrix {
    /// The matrices of `records` (macro workloads' `all` rows, applications' headline rows), one
    /// per thread count.
    pub fn from_records(records: &[Record]) -> Vec<Matrix> {
        let overall: Vec<(&Record, String)> = records
            .iter()
            .filter_map(|r| Some((r, heading(r)?)))
            .collect();
        let mut thread_counts: Vec<usize> = overall.iter().map(|(r, _)| r.threads).collect();
        thread_counts.sort_unstable();
        thread_counts.dedup();
        let mut columns: Vec<Column> = Vec::new();
        let mut targets: Vec<String> = Vec::new();
        for (r, label) in &overall {
            if !columns.iter().any(|c| c.matches(r)) {
                columns.push(Column {
                    workload: r.workload.clone(),
                    op: r.op.clone(),
                    variant: r.variant.clone(),
                    label: label.clone(),
                });
            }
            if !targets.contains(&r.target) {
                targets.push(r.target.clone());
            }
        }
        // A workload measured at several depths gets the depth in its heading.
        let snapshot = columns.clone();
        for c in &mut columns {
            let variants = snapshot
                .iter()
                .filter(|o| o.workload == c.workload && o.op == c.op)
                .count();
            if let (true, Some(depth)) = (variants > 1, depth_of(&c.variant)) {
                c.label = format!("{} d={depth}", c.workload);
            }
        }
        thread_counts
            .into_iter()
            .map(|threads| {
                let cells = targets
                    .iter()
                    .map(|t| {
                        columns
                            .iter()
                            .map(|c| {
                                overall
                                    .iter()
                                    .find(|(r, _)| {
                                        r.threads == threads && &r.target == t && c.matches(r)
                                    })
                                    .map(|(r, _)| r.ops_per_sec)
                            })
                            .collect()
                    })
                    .collect();
                Matrix {
                    threads,
                    columns: columns.clone(),
                    targets: targets.clone(),
                    cells,
                }
            })
            .collect()
    }

    /// The best rate of column `c`.
    pub fn best(&self, c: usize) -> Option<f64> {
        self.cells
            .iter()
            .filter_map(|row| row[c])
            .max_by(|a, b| a.total_cmp(b))
    }

    /// Cell `(t, c)` divided by its column's best (1.0 for the best target).
    pub fn normalized(&self, t: usize, c: usize) -> Option<f64> {
        Some(self.cells[t][c]? / self.best(c)?)
    }

    /// The markdown table: ops/s and, in parentheses, the fraction of the column's best.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n### {} thread(s): overall flowops/s, or the application's operations/s (fraction of the best)\n",
            self.threads
        );
        let heads: Vec<&str> = self.columns.iter().map(|c| c.label.as_str()).collect();
        let _ = writeln!(out, "| target | {} |", heads.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(heads.len()));
        for (t, target) in self.targets.iter().enumerate() {
            let cells: Vec<String> = (0..self.columns.len())
                .map(|c| match (self.cells[t][c], self.normalized(t, c)) {
                    (Some(rate), Some(norm)) => {
                        let mark = if norm == 1.0 { "**" } else { "" };
                        format!("{mark}{rate:.0} ({norm:.2}){mark}")
                    }
                    _ => "-".into(),
                })
                .collect();
            let _ = writeln!(out, "| {target} | {} |", cells.join(" | "));
        }
        out
    }

    /// For each target that ran webproxy at several depths: the flat directory's rate over the
    /// deepest one's (seed 000 Fig. 3's large-directory effect; 1.0 means no collapse).
    pub fn flat_over_deep(&self) -> Vec<(String, f64)> {
        let webproxy: Vec<(usize, f64)> = self
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.workload == "webproxy")
            .filter_map(|(i, c)| Some((i, depth_of(&c.variant)?.parse::<f64>().ok()?)))
            .collect();
        let flat = webproxy.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let deep = webproxy.iter().max_by(|a, b| a.1.total_cmp(&b.1));
        let (Some(&(flat, _)), Some(&(deep, _))) = (flat, deep) else {
            return Vec::new();
        };
        if flat == deep {
            return Vec::new();
        }
        self.targets
            .iter()
            .enumerate()
            .filter_map(|(t, target)| {
                Some((target.clone(), self.cells[t][flat]? / self.cells[t][deep]?))
            })
            .collect()
    }
}

/// Targets and file systems that could not run, for the matrix's footnote: skipped targets with
/// their reasons, and DAX file systems where no persistent-memory device exists.
pub fn not_runnable(skipped: &[Skipped]) -> Vec<String> {
    let mut lines: Vec<String> = skipped
        .iter()
        .filter(|s| s.workload.is_none())
        .map(|s| format!("{}: {}", s.target, s.reason))
        .collect();
    if let Some(why) = crate::scratch::dax_unavailable() {
        lines.push(format!(
            "ext4-dax, xfs-dax (seed 000's XIP/DAX modes): {why}"
        ));
    }
    lines
}

/// The whole matrix section: a table per thread count, the webproxy depth ratios, and what could
/// not run.
pub fn section(records: &[Record], skipped: &[Skipped]) -> String {
    let mut out = String::from("\n## File-system matrix\n");
    for m in Matrix::from_records(records) {
        out.push_str(&m.table());
        let ratios = m.flat_over_deep();
        if !ratios.is_empty() {
            let _ = writeln!(
                out,
                "\nwebproxy, flat directory (depth 0.7) over the deepest tree, {} thread(s):",
                m.threads
            );
            for (target, ratio) in ratios {
                let _ = writeln!(out, "- {target}: {ratio:.2}");
            }
        }
    }
    let missing = not_runnable(skipped);
    if !missing.is_empty() {
        let _ = writeln!(out, "\nNot runnable here:");
        for line in missing {
            let _ = writeln!(out, "- {line}");
        }
    }
    out
}

/// Writes `matrix-{threads}t.svg` per thread count: for each workload a group of bars, one per
/// target, each the target's rate over the column's best. Returns the file names written.
pub fn write_charts(records: &[Record], dir: &Path) -> Result<Vec<String>, String> {
    let mut written = Vec::new();
    for m in Matrix::from_records(records) {
        let name = format!("matrix-{}t.svg", m.threads);
        let path = dir.join(&name);
        draw_bars(&m, &path).map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
        written.push(name);
    }
    Ok(written)
}

fn draw_bars(m: &Matrix, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let groups = m.columns.len();
    let bars = m.targets.len().max(1);
    let width = (180 * groups as u32).max(480) + 200;
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{} thread(s): ops/s normalized to the best target",
                m.threads
            ),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..groups as f64, 0f64..1.1f64)?;
    let labels: Vec<String> = m.columns.iter().map(|c| c.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&|x| {
            // Labels sit at the middle of each group.
            let k = (x - 0.5).round();
            if (x - 0.5 - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < labels.len() {
                labels[k as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc("fraction of the best")
        .draw()?;
    let slot = 0.8 / bars as f64;
    for (t, target) in m.targets.iter().enumerate() {
        let color = Palette99::pick(t).to_rgba();
        let rects: Vec<Rectangle<(f64, f64)>> = (0..groups)
            .filter_map(|c| {
                let v = m.normalized(t, c)?;
                let x0 = c as f64 + 0.1 + slot * t as f64;
                Some(Rectangle::new([(x0, 0.0), (x0 + slot, v)], color.filled()))
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(target.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(target: &str, workload: &str, variant: &str, threads: usize, rate: f64) -> Record {
        let hist = crate::stats::histogram();
        Record::for_test((target, workload, "all", variant), threads, rate, hist)
    }

    fn sample() -> Vec<Record> {
        let flat = "files=50,depth=0.7,io=1";
        let deep = "files=50,depth=3.4,io=1";
        vec![
            record("a", "varmail", "v", 1, 100.0),
            record("b", "varmail", "v", 1, 400.0),
            record("a", "webproxy", flat, 1, 30.0),
            record("b", "webproxy", flat, 1, 10.0),
            record("a", "webproxy", deep, 1, 20.0),
            record("b", "webproxy", deep, 1, 40.0),
            record("a", "varmail", "v", 2, 150.0),
        ]
    }

    #[test]
    fn applications_add_their_headline_operations_one_column_per_variant() {
        let mut records = sample();
        let mut app = |target: &str, workload: &str, op: &str, variant: &str, rate: f64| {
            let mut r = record(target, workload, variant, 1, rate);
            r.op = op.into();
            records.push(r);
        };
        app("a", "oltp", "tpcc", "pgbench -c 2, 4 warehouses", 2000.0);
        app("b", "oltp", "tpcc", "pgbench -c 2, 4 warehouses", 1000.0);
        app(
            "a",
            "oltp",
            "tpcc-new-order",
            "pgbench -c 2, 4 warehouses",
            900.0,
        );
        app("a", "oltp", "tpcc", "sqlite3 -c 1, 4 warehouses", 7000.0);
        app("b", "kv", "ycsb-a", "leveldb", 50.0);
        app("b", "kv", "ycsb-c", "leveldb", 500.0);
        let m = &Matrix::from_records(&records)[0];
        let labels: Vec<&str> = m.columns.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "varmail",
                "webproxy d=0.7",
                "webproxy d=3.4",
                "tpcc pgbench",
                "tpcc sqlite3",
                "ycsb-a leveldb"
            ]
        );
        assert_eq!(m.normalized(1, 3), Some(0.5));
        assert_eq!(m.cells[1][4], None);
        assert_eq!(m.cells[0][5], None);
    }

    #[test]
    fn cells_are_normalized_to_the_best_of_each_column() {
        let ms = Matrix::from_records(&sample());
        assert_eq!(ms.len(), 2);
        let m = &ms[0];
        assert_eq!((m.threads, m.targets.len(), m.columns.len()), (1, 2, 3));
        assert_eq!(m.normalized(0, 0), Some(0.25));
        assert_eq!(m.normalized(1, 0), Some(1.0));
        assert_eq!(m.normalized(0, 1), Some(1.0));
        let labels: Vec<&str> = m.columns.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["varmail", "webproxy d=0.7", "webproxy d=3.4"]);
        // Target b did not run with 2 threads: its cells are empty, not zero.
        assert_eq!(ms[1].cells[1][0], None);
        assert!(ms[1].table().contains("| b | - | - | - |"));
        assert!(m.table().contains("**400 (1.00)**"));
    }

    #[test]
    fn webproxy_flat_over_deep_compares_the_extreme_depths() {
        let m = &Matrix::from_records(&sample())[0];
        assert_eq!(
            m.flat_over_deep(),
            vec![("a".to_string(), 1.5), ("b".to_string(), 0.25)]
        );
    }

    #[test]
    fn charts_are_written_per_thread_count() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_charts(&sample(), dir.path()).unwrap();
        assert_eq!(written, ["matrix-1t.svg", "matrix-2t.svg"]);
        let svg = std::fs::read_to_string(dir.path().join("matrix-1t.svg")).unwrap();
        assert!(svg.contains("webproxy d=3.4") && svg.contains("<rect"));
    }
}
