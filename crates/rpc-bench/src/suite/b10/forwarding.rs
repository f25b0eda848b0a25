//! B10's forwarding rows: a `tools/call` from an agent on node2 to the
//! browser stub on node1, against the same from an agent on node1, at window
//! 64 (throughput) and window 1 (the p50 the hop adds), with the CPU each
//! process spends a call.

use std::time::Instant;

use anyhow::{Context, Result};

use crate::baseline;
use crate::load::{self, Load, Report};

use super::cluster::Cluster;
use crate::suite::options::Options;
use crate::suite::row::{Row, throughput_row_of_runs};
use crate::suite::runs::{median_of, spread};

pub(super) async fn forwarding(options: &Options, cluster: &Cluster) -> Result<Vec<Row>> {
    let [node1, node2] = &cluster.nodes;
    let _browser = baseline::btcp_browser(&node1.ws(), "b10").await?;
    cluster.wait_owned_by_node1("b10", 1).await?;
    let params = r#"{"name":"echo","arguments":{}}"#;
    let mut rows = Vec::new();
    for conns in [1, 8] {
        let same = options.load(&node1.agent("b10"), "tools/call", params, 64, conns);
        let cross = options.load(&node2.agent("b10"), "tools/call", params, 64, conns);
        let loads = [("one node tools/call", &same), ("cross-node tools/call", &cross)];
        let (m, busy) =
            compare_with_cpu(options, &loads, &[node1.daemon.id(), node2.daemon.id(), cluster.nats_pid()]).await?;
        let what = format!(
            "cluster: forwarded `tools/call`, agent and browser on different nodes, window 64, {conns} conn. \
             Load side busy {:.0}% one node, {:.0}% cross. {}",
            busy[0][0].0 * 100.0,
            busy[1][0].0 * 100.0,
            cpu_a_call(&busy)
        );
        rows.push(throughput_row_of_runs("B10", what, &m[0], &m[1], 0.5, "≥ 0.5 × one node"));
    }
    let same = options.load(&node1.agent("b10"), "tools/call", params, 1, 1);
    let cross = options.load(&node2.agent("b10"), "tools/call", params, 1, 1);
    let loads = [("one node RTT", &same), ("cross-node RTT", &cross)];
    let (m, busy) =
        compare_with_cpu(options, &loads, &[node1.daemon.id(), node2.daemon.id(), cluster.nats_pid()]).await?;
    let mut row = added_latency_row(&m[0], &m[1]);
    row.what = format!("{}. {}", row.what, cpu_a_call(&busy));
    rows.push(row);
    Ok(rows)
}

/// Each server's CPU a call, from [`compare_with_cpu`]'s figures of the
/// one-node load (0) and the cross-node one (1), processes in the order
/// load side, node1, node2, nats-server.
fn cpu_a_call(busy: &[Vec<(f64, f64)>]) -> String {
    let us = |load: usize, process: usize| busy[load][process].1;
    format!(
        "Server CPU a call: one node {:.1} µs; cross {:.1} µs (agent's node {:.1}, nats-server {:.1}, \
         browser's node {:.1})",
        us(0, 1),
        us(1, 1) + us(1, 2) + us(1, 3),
        us(1, 2),
        us(1, 3),
        us(1, 1),
    )
}

/// [`Options::compare`], also reading how busy each process was during each
/// load: this one (the load side: the client and the browser stub; near
/// 100 % the client, not the servers, set the pace) first, then `watched`
/// (pid each). For each load and process, the median over the runs of its
/// CPU share (CPU seconds over wall seconds) and of its CPU µs a request
/// (the share over the rate: robust to other work on the machine, which
/// moves the rate and the share together).
async fn compare_with_cpu(
    options: &Options,
    loads: &[(&str, &Load)],
    watched: &[u32],
) -> Result<(Vec<Vec<Report>>, Vec<Vec<(f64, f64)>>)> {
    let pids: Vec<String> = std::iter::once("self".to_owned()).chain(watched.iter().map(u32::to_string)).collect();
    let mut runs: Vec<Vec<Report>> = vec![Vec::new(); loads.len()];
    let mut busy: Vec<Vec<Vec<(f64, f64)>>> = vec![vec![Vec::new(); pids.len()]; loads.len()];
    for _ in 0..options.repeat.max(1) {
        for (i, (label, load)) in loads.iter().enumerate() {
            let (cpu, wall): (Vec<f64>, _) = (pids.iter().map(|p| cpu_seconds(p)).collect(), Instant::now());
            let report = load::run(load).await.with_context(|| format!("{label} ({})", load.target))?;
            let wall = wall.elapsed().as_secs_f64();
            let shares: Vec<f64> = pids.iter().zip(&cpu).map(|(p, before)| (cpu_seconds(p) - before) / wall).collect();
            let shown: Vec<String> = shares.iter().map(|s| format!("{:.0}%", s * 100.0)).collect();
            eprintln!("  {label:<40} {} (busy: load side, then servers: {})", report.line(), shown.join(" "));
            for (b, share) in busy[i].iter_mut().zip(shares) {
                b.push((share, share / report.per_second * 1e6));
            }
            runs[i].push(report);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians = busy
        .into_iter()
        .map(|per_pid| {
            per_pid
                .into_iter()
                .map(|b| (median(b.iter().map(|x| x.0).collect()), median(b.iter().map(|x| x.1).collect())))
                .collect()
        })
        .collect();
    Ok((runs, medians))
}

/// A process's CPU time so far (user and system, every thread), `self` or a pid.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in brackets: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // USER_HZ, 100 on Linux.
    (ticks(14) + ticks(15)) / 100.0
}

/// What the cross-node hop adds to the p50 round trip at window 1.
fn added_latency_row(same: &[Report], cross: &[Report]) -> Row {
    let p50 = |r: &Report| r.p50_us;
    let added = median_of(cross, p50) - median_of(same, p50);
    Row {
        id: "B10",
        what: "cluster: forwarded `tools/call` p50 RTT, window 1, added by the cross-node hop".into(),
        baseline: format!("{} one node", spread(same, p50, 1, " µs")),
        measured: format!("{} cross node: +{added:.1} µs", spread(cross, p50, 1, " µs")),
        ratio: Some(median_of(cross, p50) / median_of(same, p50)),
        target: "added p50 ≤ 150 µs",
        met: Some(added <= 150.0 && cross.iter().all(|r| r.errors == 0)),
    }
}

#[cfg(test)]
mod tests {
    use crate::load::Report;
    use crate::suite::b10::forwarding::{added_latency_row, cpu_seconds};

    fn run(p50_us: f64, errors: u64) -> Report {
        Report { requests: 1000, errors, seconds: 2.0, per_second: 500.0, p50_us, p99_us: p50_us, p999_us: p50_us }
    }

    #[test]
    fn the_added_p50_is_the_difference_of_the_medians_and_an_error_fails_it() {
        let same = [run(50.0, 0), run(52.0, 0), run(70.0, 0)];
        let row = added_latency_row(&same, &[run(101.0, 0), run(100.0, 0), run(99.0, 0)]);
        assert_eq!(row.met, Some(true));
        assert!(row.measured.ends_with("+48.0 µs"), "{}", row.measured);
        let row = added_latency_row(&same, &[run(210.0, 0), run(203.0, 0), run(199.0, 0)]);
        assert_eq!(row.met, Some(false));
        let row = added_latency_row(&same, &[run(101.0, 1), run(100.0, 0), run(99.0, 0)]);
        assert_eq!(row.met, Some(false));
    }

    #[test]
    fn this_process_has_spent_some_cpu_and_a_missing_one_none() {
        let spin = (0..3_000_000u64).fold(0u64, |a, x| a.wrapping_add(x * x));
        assert!(spin > 0);
        assert!(cpu_seconds("self") >= 0.0);
        assert_eq!(cpu_seconds("0"), 0.0);
    }
}
