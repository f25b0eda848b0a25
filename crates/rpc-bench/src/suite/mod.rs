//! The benchmark suite: every benchmark target (B1-B10) that has a daemon
//! to measure, each against its baseline from the same run.
//!
//! The machines here are shared and noisy, so every comparison runs its
//! baseline and its target alternately, `--repeat` times, and reports the
//! median of each: a burst of noise then hits both sides or neither, and one
//! bad run does not decide the row.
//!
//! This file is the list: the shared servers, each benchmark in the order it
//! runs, and the table of their rows. Each benchmark's file (`b1.rs` …
//! `b10.rs`) measures it and makes its rows; beneath them are the flags and
//! alternating runs (`options.rs`), the servers (`servers.rs`), medians and
//! spreads (`runs.rs`), the table's rows (`row.rs`), and the `--write` and
//! `--plot` files (`document.rs`, `plot.rs`).

mod b1;
mod b10;
mod b2_b3;
mod b4;
mod b5;
mod b6;
mod b7;
mod b8;
mod b8s;
mod b9;
mod document;
mod options;
mod plot;
mod row;
mod runs;
mod servers;

use anyhow::{Context, Result};

use crate::pin;

pub use self::options::Options;
use self::row::Row;
use self::servers::Servers;

pub async fn run(options: Options, cores: Option<pin::Cores>) -> Result<()> {
    match cores {
        Some(c) => eprintln!("pinned: servers on CPU {}, load on CPU {}", c.server, c.load),
        None => eprintln!("fewer than two cores: nothing pinned"),
    }
    // Every server (daemon or baseline) on one core, this process (the load
    // side, and B3's and B10's browsers) on the other. B10 starts its own
    // nats-server and brokers on the servers' core too.
    let servers = Servers::start(cores.map(|c| c.server))?;
    let mut rows = Vec::new();
    if options.wants("b1") {
        rows.extend(b1::bridge_ping_throughput(&options, &servers).await?);
    }
    if options.wants("b2") || options.wants("b3") {
        rows.extend(b2_b3::broker_ping_and_forwarding(&options, &servers).await?);
    }
    if options.wants("b4") {
        rows.extend(b4::round_trip_latency(&options, &servers).await?);
    }
    if options.wants("b5") {
        rows.extend(b5::eval_ruby_latency(&options, &servers).await?);
    }
    if options.wants("b8s") {
        rows.push(b8s::sse_memory(&servers).await?);
    }
    if options.wants("b8") || options.wants("b9") {
        rows.extend(scaling_and_idle_memory(&options, &servers).await?);
    }
    if options.wants("b10") {
        rows.extend(b10::cluster(&options, &servers).await?);
    }
    if options.wants("b6") {
        rows.push(b6::extension_round_trips(&options, cores).await?);
    }
    if options.wants("b7") {
        rows.extend(b7::output_events_and_loop_pace(&options, cores).await?);
    }

    let table = row::render(&rows);
    println!("{table}");
    if let Some(path) = &options.write {
        std::fs::write(path, document::document(&table, &options, cores))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// B9's curves, then B8's memory steps: both are measured when either is
/// asked (`--only b8` also runs the curves), and `--plot` draws them side by
/// side.
async fn scaling_and_idle_memory(options: &Options, servers: &Servers) -> Result<Vec<Row>> {
    let curves = b9::scaling(options, servers).await?;
    let memory = b8::idle_memory(options, servers).await?;
    let mut rows = Vec::new();
    if options.wants("b8") {
        rows.push(b8::idle_memory_row(&memory));
    }
    if options.wants("b9") {
        rows.extend(curves.iter().map(b9::scaling_row));
    }
    if let Some(path) = &options.plot {
        plot::scaling(path, &curves, &memory)?;
        eprintln!("drew {}", path.display());
    }
    Ok(rows)
}
