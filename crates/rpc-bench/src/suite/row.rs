//! A row of the suite's table, the two kinds of comparison that make most
//! rows (throughput at least `min` × the baseline's, latency at most `max` ×),
//! and the Markdown table of them all.

use std::fmt::Write as _;

use crate::load::{Busy, Report};

use super::runs::{Runs, median, median_of, spread};

pub(super) struct Row {
    pub(super) id: &'static str,
    pub(super) what: String,
    pub(super) baseline: String,
    pub(super) measured: String,
    pub(super) ratio: Option<f64>,
    pub(super) target: &'static str,
    /// `None` for a row that is not a target, only a figure to read.
    pub(super) met: Option<bool>,
}

fn throughput_row(id: &'static str, what: String, base: &Report, got: &Report, min: f64, target: &'static str) -> Row {
    let ratio = got.per_second / base.per_second;
    Row {
        id,
        what,
        baseline: format!("{:.0}/s", base.per_second),
        measured: format!("{:.0}/s", got.per_second),
        ratio: Some(ratio),
        target,
        met: Some(ratio >= min && got.errors == 0),
    }
}

/// [`throughput_row`] from every run: each side's median with its spread.
/// Met only if no run of the target had an error.
pub(super) fn throughput_row_of_runs(
    id: &'static str,
    what: String,
    base: &[Report],
    got: &[Report],
    min: f64,
    target: &'static str,
) -> Row {
    let mut row = throughput_row(id, what, &median(base), &median(got), min, target);
    row.baseline = spread(base, |r| r.per_second, 0, "/s");
    row.measured = spread(got, |r| r.per_second, 0, "/s");
    row
}

/// [`throughput_row_of_runs`], saying how busy each side was and what each
/// side of the baseline could drive with a core to itself. A baseline whose
/// load side spent more CPU a message than its server measured the client,
/// not the server: its ratio would flatter the target, so the row is not
/// met.
pub(super) fn throughput_row_with_busy(
    id: &'static str,
    what: String,
    (base, got): (&Runs, &Runs),
    (base_name, got_name): (&str, &str),
    min: f64,
    target: &'static str,
) -> Row {
    let mut row = throughput_row_of_runs(id, what, &base.reports, &got.reports, min, target);
    let (base_busy, got_busy) = (base.busy(), got.busy());
    let verdict = if base_busy.client_bound() { "**client-bound**" } else { "not client-bound" };
    let (client, server) = base.ceilings();
    let server = server.map_or("–".to_owned(), |s| format!("{:.2} M/s", s / 1e6));
    row.what = format!(
        "{}. Busy, load side / server: {base_name} {}, {got_name} {}. A core each: load side {:.2} M/s, \
         {base_name} {server}: {verdict}",
        row.what,
        shares(&base_busy),
        shares(&got_busy),
        client / 1e6,
    );
    if base_busy.client_bound() {
        row.met = Some(false);
    }
    row
}

/// `62% / 99%`: the load side's share, then the server's.
fn shares(busy: &Busy) -> String {
    let server = busy.server.map_or("–".to_owned(), |s| format!("{:.0}%", s * 100.0));
    format!("{:.0}% / {server}", busy.load * 100.0)
}

/// [`latency_row`] from every run: each side's median with its spread.
pub(super) fn latency_row_of_runs(
    id: &'static str,
    what: String,
    (base, got): (&[Report], &[Report]),
    figure: fn(&Report) -> f64,
    max: f64,
    target: &'static str,
) -> Row {
    let mut row = latency_row(id, what, median_of(base, figure), median_of(got, figure), max, target);
    row.baseline = spread(base, figure, 1, " µs");
    row.measured = spread(got, figure, 1, " µs");
    row
}

fn latency_row(id: &'static str, what: String, base: f64, got: f64, max: f64, target: &'static str) -> Row {
    let ratio = got / base;
    Row {
        id,
        what,
        baseline: format!("{base:.1} µs"),
        measured: format!("{got:.1} µs"),
        ratio: Some(ratio),
        target,
        met: Some(ratio <= max),
    }
}

/// The table, in Markdown: one line a row, in the order given.
pub(super) fn render(rows: &[Row]) -> String {
    let mut out =
        String::from("| id | what | baseline | measured | ratio | target | met |\n|---|---|---|---|---|---|---|\n");
    for r in rows {
        let ratio = r.ratio.map_or("–".to_owned(), |x| format!("{x:.2}"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.id, r.what, r.baseline, r.measured, ratio, r.target, met
        );
    }
    out
}

#[cfg(test)]
mod tests {
    // By the full path, not `super::*`: the workspace's layout test reads
    // `super::` in an inline module as the file above, suite/mod.rs.
    use crate::load::Report;
    use crate::suite::row::{Row, latency_row_of_runs, render, throughput_row_of_runs};

    fn run(per_second: f64, p50_us: f64, errors: u64) -> Report {
        Report { requests: 1000, errors, seconds: 2.0, per_second, p50_us, p99_us: 2.0 * p50_us, p999_us: 3.0 * p50_us }
    }

    #[test]
    fn rows_show_each_sides_median_and_range_and_one_error_fails_a_throughput_target() {
        let base = [run(100.0, 1.0, 0), run(300.0, 1.0, 0), run(200.0, 1.0, 0)];
        let clean = [run(150.0, 1.0, 0), run(90.0, 1.0, 0), run(120.0, 1.0, 0)];
        let one_error = [run(150.0, 1.0, 0), run(90.0, 1.0, 1), run(120.0, 1.0, 0)];
        // An even count of runs: the upper of the two middle values.
        let (echo, daemon) = ([run(1.0, 10.0, 0), run(1.0, 20.0, 0)], [run(1.0, 30.0, 0), run(1.0, 24.0, 0)]);
        let rows = [
            throughput_row_of_runs("B1", "clean".into(), &base, &clean, 0.5, "≥ 0.5 × echo"),
            throughput_row_of_runs("B1", "one error".into(), &base, &one_error, 0.5, "≥ 0.5 × echo"),
            latency_row_of_runs("B4", "even count".into(), (&echo, &daemon), |r| r.p50_us, 1.3, "≤ 1.3 × echo"),
            Row {
                id: "B7",
                what: "a figure".into(),
                baseline: "–".into(),
                measured: "1 lines/s".into(),
                ratio: None,
                target: "–",
                met: None,
            },
        ];
        assert_eq!(
            render(&rows),
            "| id | what | baseline | measured | ratio | target | met |\n|---|---|---|---|---|---|---|\n\
             | B1 | clean | 200/s (100–300) | 120/s (90–150) | 0.60 | ≥ 0.5 × echo | yes |\n\
             | B1 | one error | 200/s (100–300) | 120/s (90–150) | 0.60 | ≥ 0.5 × echo | **no** |\n\
             | B4 | even count | 20.0 µs (10.0–20.0) | 30.0 µs (24.0–30.0) | 1.50 | ≤ 1.3 × echo | **no** |\n\
             | B7 | a figure | – | 1 lines/s | – | – | – |\n"
        );
    }
}
