//! Figures over several runs of one load: the median the table reports, and
//! the range of the runs it shows beside it.

use crate::load::{Busy, Measured, Report};

/// Every run of one load in a comparison.
#[derive(Clone, Debug, Default)]
pub(super) struct Runs {
    pub(super) reports: Vec<Report>,
    pub(super) busy: Vec<Busy>,
}

impl Runs {
    pub(super) fn push(&mut self, measured: Measured) {
        self.reports.push(measured.report);
        self.busy.push(measured.busy);
    }

    /// The median of each side's share over the runs.
    pub(super) fn busy(&self) -> Busy {
        let middle = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied()
        };
        let server = middle(self.busy.iter().filter_map(|b| b.server).collect());
        Busy { load: middle(self.busy.iter().map(|b| b.load).collect()).unwrap_or(0.0), server }
    }

    /// Each side's ceiling (load side, server): each run's rate over that
    /// side's share, the median over the runs.
    pub(super) fn ceilings(&self) -> (f64, Option<f64>) {
        let middle = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied()
        };
        let runs = || self.reports.iter().zip(&self.busy);
        let client = middle(runs().map(|(r, b)| b.client_ceiling(r.per_second)).collect());
        let server = middle(runs().filter_map(|(r, b)| b.server_ceiling(r.per_second)).collect());
        (client.unwrap_or(0.0), server)
    }
}

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
