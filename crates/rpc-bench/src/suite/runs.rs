//! Figures over several runs of one load: the median the table reports, and
//! the range of the runs it shows beside it.

use crate::load::Report;

/// The median of one figure over the runs: the middle value, or the upper
/// of the two middle ones for an even count.
pub(super) fn median_of(runs: &[Report], figure: fn(&Report) -> f64) -> f64 {
    let mut values: Vec<f64> = runs.iter().map(figure).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median of each figure over several runs (counts and seconds summed).
pub(super) fn median(runs: &[Report]) -> Report {
    Report {
        requests: runs.iter().map(|r| r.requests).sum(),
        errors: runs.iter().map(|r| r.errors).sum(),
        seconds: runs.iter().map(|r| r.seconds).sum(),
        per_second: median_of(runs, |r| r.per_second),
        p50_us: median_of(runs, |r| r.p50_us),
        p99_us: median_of(runs, |r| r.p99_us),
        p999_us: median_of(runs, |r| r.p999_us),
    }
}

/// The median of one figure over the runs with `decimals`, then its range:
/// `12.3 µs (11.8–13.0)`.
pub(super) fn spread(runs: &[Report], figure: fn(&Report) -> f64, decimals: usize, unit: &str) -> String {
    let mut values: Vec<f64> = runs.iter().map(figure).collect();
    values.sort_by(f64::total_cmp);
    let (low, mid, high) = (values[0], values[values.len() / 2], values[values.len() - 1]);
    format!("{mid:.decimals$}{unit} ({low:.decimals$}–{high:.decimals$})")
}
