//! The Markdown file `--write` makes: the table with what it was measured on
//! (machine, date, pinning) and the command that repeats the run.

use std::process::Command;

use crate::pin;

use super::options::Options;

pub(super) fn document(table: &str, options: &Options, pinned: Option<pin::Cores>) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    // Not available_parallelism: the suite is pinned to one core by now.
    let cores = std::fs::read_to_string("/proc/cpuinfo")
        .map(|c| c.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC").output().ok();
    let date = date.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
    let pinning = match pinned {
        Some(c) => format!(
            "every server (daemon or baseline, and the processes it starts) pinned to CPU {}, the load \
             generator (one thread, with B3's and B10's browsers) to CPU {}",
            c.server, c.load
        ),
        None => "not pinned (fewer than two cores)".into(),
    };
    let plot = options.plot.as_ref().map(|p| format!(" --plot {}", p.display())).unwrap_or_default();
    format!(
        "# Benchmarks\n\nThe latest run of `rpc-bench suite`. Compare ratios, not absolute numbers. Each \
         row gives the median of {} alternating runs of {} s (after {} s of warm-up) of its baseline and \
         its target, with the range of the runs in brackets. A throughput row also gives each side's \
         CPU share over the measured time (load side / server) and what each side of the baseline could \
         drive with a core to itself; it is **client-bound**, and not met, when the load side spent more \
         CPU a message than the baseline's server.\n\n\
         - machine: {cores} cores, {cpu}, Linux {}\n\
         - date: {date}\n\
         - pinning: {pinning}\n\
         - command: `cargo build --release --workspace --bins && ./target/release/rpc-bench suite --seconds {} \
         --warmup {} --repeat {} --only {}{plot} --write {}`\n\n{table}",
        options.repeat,
        options.seconds,
        options.warmup,
        kernel.trim(),
        options.seconds,
        options.warmup,
        options.repeat,
        options.only.join(","),
        options.write.as_ref().map_or("BENCHMARKS.md".into(), |p| p.display().to_string()),
    )
}
