//! B5: p50 latency of `eval_ruby` of `1+1` through supex-bridge (one call at
//! a time, after the `hello` a client sends) against supex-bridge's own Ruby
//! driver over a bare pipe, Ruby on the servers' core. Skipped, with a line
//! saying why, when Ruby cannot be started.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::baseline;
use crate::load::{self, Report};

use super::options::Options;
use super::row::{Row, latency_row_of_runs};
use super::servers::Servers;

/// The row, or `None` when the driver could not run at all.
pub(super) async fn eval_ruby_latency(options: &Options, servers: &Servers) -> Result<Option<Row>> {
    eprintln!("B5: eval_ruby of 1+1 through supex-bridge vs its driver over a bare pipe");
    let (pipe, bridged) = alternate(options, servers).await?;
    if pipe.is_empty() {
        return Ok(None);
    }
    let what = "`eval_ruby` of `1+1`, p50 latency".into();
    Ok(Some(latency_row_of_runs("B5", what, (&pipe, &bridged), |r| r.p50_us, 1.5, "≤ 1.5 × bare pipe")))
}

/// The bare pipe and the bridge in turn, `--repeat` times; stops (with what
/// it has) at the first run the driver fails.
async fn alternate(options: &Options, servers: &Servers) -> Result<(Vec<Report>, Vec<Report>)> {
    let ruby = std::env::var("SUPEX_RUBY").unwrap_or_else(|_| "ruby".into());
    let mut load =
        options.load(&servers.bridge, "tools/call", r#"{"name":"eval_ruby","arguments":{"code":"1+1"}}"#, 1, 1);
    load.hello = Some(("hello".into(), r#"{"name":"rpc-bench","version":"1","agent":"rpc-bench","pid":1}"#.into()));
    let (seconds, warmup) = (Duration::from_secs_f64(options.seconds), Duration::from_secs_f64(options.warmup));
    let (mut pipe, mut bridged) = (Vec::new(), Vec::new());
    for _ in 0..options.repeat.max(1) {
        match baseline::ruby_pipe_eval(&ruby, seconds, warmup, servers.cpu).await {
            Ok(report) => {
                eprintln!("  {:<40} {}", "driver over a bare pipe", report.line());
                pipe.push(report);
            }
            Err(e) => {
                eprintln!("  B5 skipped: {e:#} (is Ruby installed? SUPEX_RUBY={ruby})");
                break;
            }
        }
        let report = load::run(&load).await.context("supex-bridge eval_ruby")?;
        eprintln!("  {:<40} {}", "supex-bridge eval_ruby 1+1", report.line());
        bridged.push(report);
    }
    Ok((pipe, bridged))
}
