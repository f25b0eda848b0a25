//! B9: throughput as connections grow. supex-bridge's and btcp-broker's
//! `ping` (window 64) at 1, 8, 64 and 512 connections, each point alternating
//! with the raw echo of its transport at the same count: where the echo
//! falls too, what falls is the load side and the kernel, not the daemon.

use anyhow::Result;

use crate::load::Report;

use super::options::Options;
use super::row::Row;
use super::runs::median_of;
use super::servers::Servers;

/// The connection counts of B9's throughput curves.
pub(super) const SCALING_CONNECTIONS: [usize; 4] = [1, 8, 64, 512];

/// One daemon's throughput at each of [`SCALING_CONNECTIONS`], with its
/// baseline's at the same counts: every run of each.
pub(super) struct Curve {
    pub(super) name: &'static str,
    pub(super) baseline_name: &'static str,
    pub(super) baseline: Vec<Vec<Report>>,
    pub(super) target: Vec<Vec<Report>>,
}

/// Both daemons' curves, supex-bridge's first.
pub(super) async fn scaling(options: &Options, servers: &Servers) -> Result<Vec<Curve>> {
    eprintln!("B9: throughput by connections, with the baselines at the same counts");
    let pairs = [
        ("supex-bridge", (&servers.echo, servers.echo_pid), (&servers.bridge, servers.bridge_pid), "echo"),
        ("btcp-broker", (&servers.ws_echo, servers.ws_echo_pid), (&servers.agent, servers.broker_pid()), "WS echo"),
    ];
    let mut curves = Vec::new();
    for (name, (baseline_target, baseline_pid), (target, pid), baseline_name) in pairs {
        let mut curve = Curve { name, baseline_name, baseline: Vec::new(), target: Vec::new() };
        for conns in SCALING_CONNECTIONS {
            let base = options.load(baseline_target, "ping", "{}", 64, conns).watching(&[baseline_pid]);
            let got = options.load(target, "ping", "{}", 64, conns).watching(&[pid]);
            let (base_label, got_label) =
                (format!("{baseline_name} ping, {conns} conn"), format!("{name} ping, {conns} conn"));
            let mut runs = options.compare(&[(&base_label, &base), (&got_label, &got)]).await?;
            curve.target.push(runs.pop().unwrap().reports);
            curve.baseline.push(runs.pop().unwrap().reports);
        }
        curves.push(curve);
    }
    Ok(curves)
}

/// "Does not fall": the 512-connection point keeps 90% of the daemon's best,
/// either as it is or measured against the raw echo at the same counts (when
/// the echo falls too, the load generator and the kernel are what fall).
pub(super) fn scaling_row(curve: &Curve) -> Row {
    let medians = per_second_medians(&curve.target);
    let base = per_second_medians(&curve.baseline);
    let (at_peak, peak) =
        medians.iter().copied().enumerate().fold((0, 0.0), |best, (i, t)| if t > best.1 { (i, t) } else { best });
    let last = *medians.last().unwrap();
    // The same connection counts on the raw echo: how much of the
    // fall from the daemon's best point the load side accounts for.
    let echo_kept = base.last().unwrap() / base[at_peak];
    Row {
        id: "B9",
        what: format!("{} `ping` at {} conns", curve.name, join(&SCALING_CONNECTIONS, "/")),
        baseline: by_connections(&base),
        measured: format!(
            "{}; 512 keeps {:.2} of the best, the echo over the same counts {:.2}",
            by_connections(&medians),
            last / peak,
            echo_kept
        ),
        ratio: Some(last / peak),
        target: "no fall as conns grow",
        met: Some(last >= 0.9 * peak || last / peak >= 0.9 * echo_kept),
    }
}

/// The median throughput at each connection count.
fn per_second_medians(points: &[Vec<Report>]) -> Vec<f64> {
    points.iter().map(|runs| median_of(runs, |r| r.per_second)).collect()
}

/// `1: 123/s, 8: 456/s, …`, one figure per connection count.
fn by_connections(per_second: &[f64]) -> String {
    per_second.iter().zip(SCALING_CONNECTIONS).map(|(t, c)| format!("{c}: {t:.0}/s")).collect::<Vec<_>>().join(", ")
}

fn join(values: &[usize], separator: &str) -> String {
    values.iter().map(usize::to_string).collect::<Vec<_>>().join(separator)
}

#[cfg(test)]
mod tests {
    // By the full path, not `super::*`: the workspace's layout test reads
    // `super::` in an inline module as the file above, suite/mod.rs.
    use crate::load::Report;
    use crate::suite::b9::{Curve, scaling_row};

    /// One run at each connection count.
    fn points(per_second: [f64; 4]) -> Vec<Vec<Report>> {
        let run = |per_second| Report {
            requests: 1000,
            errors: 0,
            seconds: 2.0,
            per_second,
            p50_us: 1.0,
            p99_us: 1.0,
            p999_us: 1.0,
        };
        per_second.into_iter().map(|t| vec![run(t)]).collect()
    }

    #[test]
    fn a_fall_from_the_best_point_is_met_only_when_the_echo_falls_as_much() {
        let target = points([100.0, 200.0, 150.0, 170.0]);
        let falling_echo = Curve {
            name: "supex-bridge",
            baseline_name: "echo",
            baseline: points([1000.0, 2000.0, 1500.0, 1500.0]),
            target: target.clone(),
        };
        let row = scaling_row(&falling_echo);
        assert_eq!(row.what, "supex-bridge `ping` at 1/8/64/512 conns");
        assert_eq!(row.baseline, "1: 1000/s, 8: 2000/s, 64: 1500/s, 512: 1500/s");
        assert_eq!(
            row.measured,
            "1: 100/s, 8: 200/s, 64: 150/s, 512: 170/s; 512 keeps 0.85 of the best, the echo over the same counts 0.75"
        );
        assert_eq!((row.ratio, row.met), (Some(0.85), Some(true)));
        let steady_echo = Curve { baseline: points([1000.0; 4]), ..falling_echo };
        assert_eq!(scaling_row(&steady_echo).met, Some(false));
    }
}
