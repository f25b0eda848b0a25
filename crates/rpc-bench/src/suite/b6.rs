//! B6: an extension's `editor/getMessage` (hl7, window 64) round trips
//! through hermes-host, against the same extension loop on a raw
//! Content-Length echo over a pipe (see `hermes.rs` for both sides).

use anyhow::{Context, Result};

use crate::hermes::bench::HermesBench;
use crate::pin;

use super::options::{Options, busy_line};
use super::row::{Row, throughput_row_with_busy};
use super::runs::Runs;

const WINDOW: usize = 64;

pub(super) async fn extension_round_trips(options: &Options, cores: Option<pin::Cores>) -> Result<Row> {
    eprintln!("B6: an extension's editor/getMessage through hermes-host vs the same loop on a Content-Length echo");
    let (echoed, hosted) = alternate(options, cores).await?;
    let what = format!("extension → hermes-host `editor/getMessage` (hl7), window {WINDOW}");
    let names = ("Content-Length echo", "hermes-host");
    Ok(throughput_row_with_busy("B6", what, (&echoed, &hosted), names, 0.9, "≥ 0.9 × Content-Length echo"))
}

/// The echo and the host in turn, `--repeat` times, with one host started
/// for all of them; on a blocking thread, as the runs wait on processes and
/// files.
async fn alternate(options: &Options, cores: Option<pin::Cores>) -> Result<(Runs, Runs)> {
    let (seconds, warmup, repeat) = (options.seconds, options.warmup, options.repeat.max(1));
    tokio::task::spawn_blocking(move || -> Result<(Runs, Runs)> {
        let bench = HermesBench::start(WINDOW, seconds, warmup, cores)?;
        let (mut echoed, mut hosted) = (Runs::default(), Runs::default());
        for _ in 0..repeat {
            let run = bench.echo_run().context("B6 against the echo")?;
            eprintln!("  {:<40} {} {}", "extension <-> Content-Length echo", run.report.line(), busy_line(&run.busy));
            echoed.push(run);
            let run = bench.host_run().context("B6 in hermes-host")?;
            eprintln!(
                "  {:<40} {} {}",
                "extension <-> hermes-host getMessage",
                run.report.line(),
                busy_line(&run.busy)
            );
            hosted.push(run);
        }
        Ok((echoed, hosted))
    })
    .await?
}
