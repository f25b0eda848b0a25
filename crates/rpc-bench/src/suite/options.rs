//! The suite's flags, and the one way every throughput and latency benchmark
//! runs its loads: baseline and targets alternating, `--repeat` times over.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::load::{self, Busy, Load};

use super::runs::Runs;

#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Measured seconds per run.
    #[arg(long, default_value_t = 2.0)]
    pub(super) seconds: f64,
    /// Warm-up seconds per run (not measured).
    #[arg(long, default_value_t = 0.5)]
    pub(super) warmup: f64,
    /// Runs of each baseline/target pair, alternating; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub(super) repeat: usize,
    /// Which benchmarks to run.
    #[arg(long, value_delimiter = ',', default_value = "b1,b2,b3,b4,b5,b6,b7,b8,b8s,b9,b10")]
    pub(super) only: Vec<String>,
    /// Connections for B8.
    #[arg(long, default_value_t = 10_000)]
    pub(super) idle: usize,
    /// Also write the table, the machine and the command to this Markdown file.
    #[arg(long)]
    pub(super) write: Option<PathBuf>,
    /// Draw B9's scaling curves (throughput by connections, memory by idle
    /// connections) into this SVG file.
    #[arg(long)]
    pub(super) plot: Option<PathBuf>,
}

impl Options {
    pub(super) fn wants(&self, id: &str) -> bool {
        self.only.iter().any(|o| o.eq_ignore_ascii_case(id))
    }

    /// A load of the suite's measured and warm-up seconds.
    pub(super) fn load(&self, target: &str, method: &str, params: &str, window: usize, connections: usize) -> Load {
        Load {
            target: target.to_owned(),
            method: method.to_owned(),
            params: params.to_owned(),
            window,
            connections,
            duration: Duration::from_secs_f64(self.seconds),
            warmup: Duration::from_secs_f64(self.warmup),
            hello: None,
            exact: window == 1,
            servers: Vec::new(),
        }
    }

    /// Runs each load in turn, `repeat` times over (baseline and targets
    /// alternating), and returns every run of each, with how busy each side
    /// was.
    pub(super) async fn compare(&self, loads: &[(&str, &Load)]) -> Result<Vec<Runs>> {
        let mut runs: Vec<Runs> = (0..loads.len()).map(|_| Runs::default()).collect();
        for _ in 0..self.repeat.max(1) {
            for (i, (label, load)) in loads.iter().enumerate() {
                let measured = load::measure(load).await.with_context(|| format!("{label} ({})", load.target))?;
                eprintln!("  {label:<40} {} {}", measured.report.line(), busy_line(&measured.busy));
                runs[i].push(measured);
            }
        }
        Ok(runs)
    }
}

/// `(busy: load side 62%, server 99%)`.
pub(super) fn busy_line(busy: &Busy) -> String {
    match busy.server {
        Some(server) => format!("(busy: load side {:.0}%, server {:.0}%)", busy.load * 100.0, server * 100.0),
        None => format!("(busy: load side {:.0}%)", busy.load * 100.0),
    }
}
