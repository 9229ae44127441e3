//! Plots for the `--out` report (SVG, through plotters): per workload, latency CDFs of every
//! operation with one line per target, and, where several thread counts ran, throughput against
//! threads.

use std::path::Path;

use plotters::prelude::*;

use crate::suite::Record;

/// One subplot: a title and one named line per target.
struct Panel {
    title: String,
    lines: Vec<(String, Vec<(f64, f64)>)>,
}

/// The points (latency ns, fraction of operations at or below it) of a record's CDF.
pub fn cdf_points(record: &Record) -> Vec<(f64, f64)> {
    let quantiles = (0..=100)
        .map(|k| k as f64 / 100.0)
        .chain([0.995, 0.999, 0.9999, 1.0]);
    let mut points: Vec<(f64, f64)> = quantiles
        .map(|q| (record.hist.value_at_quantile(q).max(1) as f64, q))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    points
}

fn point_title(r: &Record) -> String {
    let mut title = r.op.clone();
    if r.io_size > 0 {
        title.push_str(&format!(" {}B", r.io_size));
    }
    if !r.variant.is_empty() {
        title.push_str(&format!(" {}", r.variant));
    }
    title
}

/// Distinct (op, io_size, variant) points of `workload`, in measurement order.
fn points_of<'a>(records: &'a [Record], workload: &str) -> Vec<&'a Record> {
    let mut firsts: Vec<&Record> = Vec::new();
    for r in records.iter().filter(|r| r.workload == workload) {
        let seen = firsts
            .iter()
            .any(|f| f.op == r.op && f.io_size == r.io_size && f.variant == r.variant);
        if !seen {
            firsts.push(r);
        }
    }
    firsts
}

fn same_op(a: &Record, b: &Record) -> bool {
    a.workload == b.workload && a.op == b.op && a.io_size == b.io_size && a.variant == b.variant
}

/// Writes `{workload}-latency.svg` (and `{workload}-threads.svg` when several thread counts ran)
/// into `dir`, and the matrix bar charts when macro workloads ran; returns the file names written.
pub fn write_plots(records: &[Record], dir: &Path) -> Result<Vec<String>, String> {
    let mut workloads: Vec<&str> = records.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    let mut written = if crate::matrix::has_cells(records) {
        crate::matrix::write_charts(records, dir)?
    } else {
        Vec::new()
    };
    for workload in workloads {
        let points = points_of(records, workload);
        let min_threads = records.iter().map(|r| r.threads).min().unwrap_or(1);
        let latency: Vec<Panel> = points
            .iter()
            .map(|p| Panel {
                title: format!("{} ({min_threads} thread)", point_title(p)),
                lines: records
                    .iter()
                    .filter(|r| same_op(r, p) && r.threads == min_threads)
                    .map(|r| (r.target.clone(), cdf_points(r)))
                    .collect(),
            })
            .collect();
        let name = format!("{workload}-latency.svg");
        draw(
            &dir.join(&name),
            &latency,
            "latency (ns, log)",
            "fraction of ops",
            XAxis::Log,
        )?;
        written.push(name);

        let mut thread_counts: Vec<usize> = records.iter().map(|r| r.threads).collect();
        thread_counts.sort_unstable();
        thread_counts.dedup();
        if thread_counts.len() > 1 {
            let throughput: Vec<Panel> = points
                .iter()
                .map(|p| {
                    let mut targets: Vec<&str> = Vec::new();
                    for r in records.iter().filter(|r| same_op(r, p)) {
                        if !targets.contains(&r.target.as_str()) {
                            targets.push(&r.target);
                        }
                    }
                    Panel {
                        title: point_title(p),
                        lines: targets
                            .into_iter()
                            .map(|t| {
                                let line = records
                                    .iter()
                                    .filter(|r| same_op(r, p) && r.target == t)
                                    .map(|r| (r.threads as f64, r.ops_per_sec))
                                    .collect();
                                (t.to_string(), line)
                            })
                            .collect(),
                    }
                })
                .collect();
            let name = format!("{workload}-threads.svg");
            draw(
                &dir.join(&name),
                &throughput,
                "threads",
                "ops/s",
                XAxis::Counts,
            )?;
            written.push(name);
        }
    }
    Ok(written)
}

/// How a panel's x axis is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum XAxis {
    /// Logarithmic (latencies), lines only: a CDF has a point per histogram bucket.
    Log,
    /// Integer ticks (thread counts), a marker on every measured point.
    Counts,
}

/// Width of the column right of each panel that holds its legend, outside the data.
const LEGEND_WIDTH_PX: u32 = 150;

fn draw(
    path: &Path,
    panels: &[Panel],
    x_desc: &str,
    y_desc: &str,
    x_axis: XAxis,
) -> Result<(), String> {
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    let size = ((420 + LEGEND_WIDTH_PX) * cols as u32, 320 * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
        let width = area.dim_in_pixel().0;
        let (plot, legend) = area.split_horizontally(width.saturating_sub(LEGEND_WIDTH_PX));
        draw_panel(&plot, panel, x_desc, y_desc, x_axis).map_err(|e| err(&e))?;
        draw_legend(&legend, panel).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

/// The panel's targets, one line sample and name each, in the column beside its plot.
fn draw_legend(area: &Area<'_>, panel: &Panel) -> Result<(), Box<dyn std::error::Error>> {
    for (i, (name, _)) in panel.lines.iter().enumerate() {
        let color = series_color(i);
        let y = 40 + 18 * i as i32;
        area.draw(&PathElement::new(
            vec![(4, y), (22, y)],
            color.stroke_width(2),
        ))?;
        area.draw(&Text::new(
            name.clone(),
            (28, y - 7),
            ("sans-serif", 13).into_font(),
        ))?;
    }
    Ok(())
}

fn series_color(i: usize) -> RGBAColor {
    Palette99::pick(i).to_rgba()
}

/// `1500000` as `1.5M`, `0.25` as `0.25`: axis labels that stay short.
pub fn short_number(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = format!("{scaled:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{suffix}")
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(
    area: &Area<'_>,
    panel: &Panel,
    x_desc: &str,
    y_desc: &str,
    x_axis: XAxis,
) -> Result<(), Box<dyn std::error::Error>> {
    let all = panel.lines.iter().flat_map(|(_, pts)| pts.iter());
    let (x_lo, x_hi, y_hi) = all.fold((f64::MAX, f64::MIN, 0f64), |(lo, hi, y), &(px, py)| {
        (lo.min(px), hi.max(px), y.max(py))
    });
    if x_lo > x_hi {
        return Ok(());
    }
    let y_range = 0f64..(y_hi * 1.1).max(1e-9);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(60);
    match x_axis {
        XAxis::Log => {
            let x_range = (x_lo * 0.8).max(1.0)..(x_hi * 1.25);
            let mut chart = builder.build_cartesian_2d(x_range.log_scale(), y_range)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_labels(6)
                .x_label_formatter(&|v| short_number(*v))
                .y_label_formatter(&|v| short_number(*v))
                .light_line_style(WHITE)
                .draw()?;
            for (i, (_, pts)) in panel.lines.iter().enumerate() {
                let style = series_color(i).stroke_width(2);
                chart.draw_series(LineSeries::new(pts.iter().copied(), style))?;
            }
        }
        XAxis::Counts => {
            // Whole numbers from one below the smallest count to one above the largest: the
            // ticks fall on counts, never between them.
            let x_range = (x_lo as i64 - 1).max(0)..(x_hi as i64 + 1);
            let ticks = (x_range.end - x_range.start + 1) as usize;
            let mut chart = builder.build_cartesian_2d(x_range, y_range)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_labels(ticks.min(17))
                .y_label_formatter(&|v| short_number(*v))
                .light_line_style(WHITE)
                .draw()?;
            for (i, (_, pts)) in panel.lines.iter().enumerate() {
                let color = series_color(i);
                let counted = pts.iter().map(|&(x, y)| (x as i64, y));
                chart.draw_series(LineSeries::new(counted.clone(), color.stroke_width(2)))?;
                chart.draw_series(counted.map(|p| Circle::new(p, 4, color.filled())))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(short_number(1_500_000.0), "1.5M");
        assert_eq!(short_number(800_000.0), "800k");
        assert_eq!(short_number(10_000.0), "10k");
        assert_eq!(short_number(2.0), "2");
        assert_eq!(short_number(0.25), "0.25");
    }

    #[test]
    fn cdf_points_rise_from_the_fastest_to_the_slowest_operation() {
        let mut hist = crate::stats::histogram();
        for v in 1..=1000u64 {
            hist.record(v * 100).unwrap();
        }
        let record = Record::for_test(("t", "w", "op", ""), 1, 1.0, hist);
        let points = cdf_points(&record);
        assert!(points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!((points[0].0 - 100.0).abs() < 1.0);
        assert_eq!(points.last().unwrap().1, 1.0);
        assert!((points.last().unwrap().0 - 100_000.0).abs() / 100_000.0 < 0.002);
    }
}
