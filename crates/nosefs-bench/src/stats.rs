//! Latency histograms and run statistics.

use hdrhistogram::Histogram;

/// A latency histogram in nanoseconds (1 ns to 100 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    assert!(!values.is_empty(), "median of nothing");
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Spread of `values` around their median: (max - min) / median.
pub fn spread(values: &[f64]) -> f64 {
    let m = median(values);
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if m == 0.0 {
        0.0
    } else {
        (hi - lo) / m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(spread(&[9.0, 10.0, 11.0]), 0.2);
    }

    #[test]
    fn merged_histograms_keep_every_sample_and_percentiles() {
        let mut a = histogram();
        let mut b = histogram();
        for v in 1..=900u64 {
            a.record(v * 10).unwrap();
        }
        for v in 901..=1000u64 {
            b.record(v * 10).unwrap();
        }
        a.add(&b).unwrap();
        assert_eq!(a.len(), 1000);
        // The 50th percentile of 10, 20, ..., 10000 is 5000, the 99th 9900, within 0.1%.
        let p50 = a.value_at_quantile(0.50) as f64;
        let p99 = a.value_at_quantile(0.99) as f64;
        assert!((p50 - 5000.0).abs() / 5000.0 < 0.002, "p50 {p50}");
        assert!((p99 - 9900.0).abs() / 9900.0 < 0.002, "p99 {p99}");
    }
}
