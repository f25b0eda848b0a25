//! B7: ralph-server's fan-out. How long a line the agent writes to its PTY
//! takes to reach subscribers as an `output` event (with 1 subscriber, and
//! with 1000 of which one never reads), and how much the subscribers slow
//! the loop's pace (see `ralph.rs` for the agent and the subscribers).

use anyhow::{Context, Result};

use crate::load::Report;
use crate::pin;
use crate::ralph::bench::RalphBench;
use crate::ralph::subscribers::Subscribers;

use super::options::Options;
use super::row::Row;
use super::runs::{median, spread};

/// Every run of each round: one ralph-server each, one task.
struct Rounds {
    no_subscribers: Vec<Report>,
    one_subscriber: Vec<Report>,
    thousand_one_stalled: Vec<Report>,
}

pub(super) async fn output_events_and_loop_pace(options: &Options, cores: Option<pin::Cores>) -> Result<Vec<Row>> {
    eprintln!(
        "B7: ralph-server, agent line in the PTY -> `output` event; loop pace with 1 and 1000 subscribers vs none"
    );
    let rounds = alternate(options, cores).await?;
    let mut rows = vec![
        event_latency_row("1 subscriber", &rounds.one_subscriber),
        event_latency_row("1000 subscribers, one never reads", &rounds.thousand_one_stalled),
    ];
    rows.extend(loop_pace_rows(&rounds));
    Ok(rows)
}

/// The three rounds in turn, `--repeat` times; on a blocking thread, as the
/// rounds wait on processes and files.
async fn alternate(options: &Options, cores: Option<pin::Cores>) -> Result<Rounds> {
    let (seconds, warmup, repeat) = (options.seconds, options.warmup, options.repeat.max(1));
    let rounds = [
        ("no subscribers", Subscribers { count: 0, one_stalled: false }),
        ("1 subscriber", Subscribers { count: 1, one_stalled: false }),
        ("1000 subscribers, one never reads", Subscribers { count: 1000, one_stalled: true }),
    ];
    let runs = tokio::task::spawn_blocking(move || -> Result<Vec<Vec<Report>>> {
        let mut bench = RalphBench::new(seconds, warmup, cores)?;
        let mut runs = vec![Vec::new(); rounds.len()];
        for _ in 0..repeat {
            for (i, (label, subscribers)) in rounds.iter().enumerate() {
                let report = bench.round(*subscribers).with_context(|| format!("B7 with {label}"))?;
                eprintln!(
                    "  {label:<40} flood {:>8.0} lines/s  event latency p50 {:>7.1} µs  p99 {:>8.1} µs  \
                     p99.9 {:>8.1} µs  ({} samples, {} events lost)",
                    report.per_second, report.p50_us, report.p99_us, report.p999_us, report.requests, report.errors
                );
                runs[i].push(report);
            }
        }
        Ok(runs)
    })
    .await??;
    let [no_subscribers, one_subscriber, thousand_one_stalled] = runs.try_into().unwrap();
    Ok(Rounds { no_subscribers, one_subscriber, thousand_one_stalled })
}

/// Agent line → `output` event in one round: met if the median p99 is at
/// most 5 ms.
fn event_latency_row(label: &str, runs: &[Report]) -> Row {
    let p99 = median(runs).p99_us;
    Row {
        id: "B7",
        what: format!("agent line in the PTY → `output` event, {label}"),
        baseline: "–".into(),
        measured: format!("p50 {}, p99 {}", spread(runs, |r| r.p50_us, 1, " µs"), spread(runs, |r| r.p99_us, 1, " µs")),
        ratio: None,
        target: "p99 ≤ 5 ms",
        met: Some(p99 <= 5000.0),
    }
}

/// The flood's pace with subscribers against none: 1 subscriber, then 1000
/// with one stalled; each at least 0.9 of none.
fn loop_pace_rows(rounds: &Rounds) -> [Row; 2] {
    let none = median(&rounds.no_subscribers);
    let baseline = format!("{} with none", spread(&rounds.no_subscribers, |r| r.per_second, 0, " lines/s"));
    let one_ratio = median(&rounds.one_subscriber).per_second / none.per_second;
    let one = Row {
        id: "B7",
        what: "loop pace (agent flooding its PTY), 1 subscriber".into(),
        baseline: baseline.clone(),
        measured: spread(&rounds.one_subscriber, |r| r.per_second, 0, " lines/s"),
        ratio: Some(one_ratio),
        target: "≥ 0.9 × no subscribers",
        met: Some(one_ratio >= 0.9),
    };
    let ratio = median(&rounds.thousand_one_stalled).per_second / none.per_second;
    let thousand = Row {
        id: "B7",
        what: "loop pace (agent flooding its PTY), 1000 subscribers one of which never reads".into(),
        baseline,
        measured: spread(&rounds.thousand_one_stalled, |r| r.per_second, 0, " lines/s"),
        ratio: Some(ratio),
        target: "≥ 0.9 × no subscribers",
        met: Some(ratio >= 0.9),
    };
    [one, thousand]
}
