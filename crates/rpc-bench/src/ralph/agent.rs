//! `rpc-bench ralph-agent`: the agent ralph-server runs for B7's one
//! iteration. Paced lines stamped with CLOCK_MONOTONIC, then a flood whose
//! pace it reports in a file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use nix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};

use crate::pin;

/// `rpc-bench ralph-agent`: the agent side of B7.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// Start once this file exists (the subscribers are in place).
    #[arg(long)]
    go: PathBuf,
    /// Where the flood's pace goes (JSON).
    #[arg(long)]
    report: PathBuf,
    /// Paced lines measured, after `--warmup-lines` that are not.
    #[arg(long, default_value_t = 1000)]
    pub(super) lines: u64,
    #[arg(long, default_value_t = 100)]
    pub(super) warmup_lines: u64,
    /// Between two paced lines.
    #[arg(long, default_value_t = 5000)]
    pub(super) interval_us: u64,
    /// Seconds of flood measured, after `--warmup` seconds that are not.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Pin to this CPU before anything else.
    #[arg(long)]
    cpu: Option<usize>,
    /// The prompt file ralph-server passes (`{PROMPT_FILE}`); not read.
    prompt: Option<PathBuf>,
}

/// How fast the loop took the flood.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Flood {
    lines: u64,
    pub(super) seconds: f64,
    pub(super) per_second: f64,
}

/// Nanoseconds on CLOCK_MONOTONIC, the clock the agent and subscribers share.
pub(super) fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The agent: paced stamped lines, then a flood, then `rpcbench D` and exit.
pub fn run(args: AgentArgs) -> Result<()> {
    if let Some(cpu) = args.cpu {
        pin::pin_current_thread(cpu)?;
    }
    // Unbuffered: each paced line is one write(2), right after its stamp.
    let mut terminal = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    writeln!(terminal, "rpc-bench agent: waiting for the subscribers")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !args.go.exists() {
        if Instant::now() > deadline {
            bail!("{} did not appear within 60 s", args.go.display());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let interval = Duration::from_micros(args.interval_us);
    let start = Instant::now();
    for seq in 0..args.warmup_lines + args.lines {
        let at = start + interval.mul_f64(seq as f64);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let tag = if seq < args.warmup_lines { 'W' } else { 'L' };
        let stamp = monotonic_ns();
        terminal.write_all(format!("rpcbench {tag} {seq} {stamp}\n").as_bytes())?;
    }
    // Let the last paced lines go out before the flood fills the terminal.
    std::thread::sleep(Duration::from_millis(100));
    let flood = flood(&mut terminal, &args)?;
    let tmp = args.report.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&flood)?)?;
    std::fs::rename(&tmp, &args.report)?;
    writeln!(terminal, "rpcbench D")?;
    Ok(())
}

/// Lines of about 100 bytes as fast as the terminal takes them.
fn flood(terminal: &mut File, args: &AgentArgs) -> Result<Flood> {
    let mut out = BufWriter::with_capacity(16 * 1024, terminal);
    let pad = "x".repeat(80);
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let stop_at = measure_from + Duration::from_secs_f64(args.seconds);
    let mut seq = 0u64;
    let mut from = None;
    let (lines, seconds) = loop {
        for _ in 0..64 {
            writeln!(out, "rpcbench F {seq} {pad}")?;
            seq += 1;
        }
        let now = Instant::now();
        match from {
            None if now >= measure_from => from = Some((seq, now)),
            Some((first, at)) if now >= stop_at => break (seq - first, (now - at).as_secs_f64()),
            _ => {}
        }
    };
    out.flush()?;
    Ok(Flood { lines, seconds, per_second: lines as f64 / seconds })
}

impl AgentArgs {
    /// The suite's settings: 100 + 1000 paced lines, one each 5 ms (an agent
    /// printing 200 lines a second; with 999 readers that is 200 000 events a
    /// second, what two cores can carry without the fan-out falling behind).
    pub(super) fn default_for(seconds: f64, warmup: f64) -> AgentArgs {
        AgentArgs {
            go: PathBuf::new(),
            report: PathBuf::new(),
            lines: 1000,
            warmup_lines: 100,
            interval_us: 5000,
            seconds,
            warmup,
            cpu: None,
            prompt: None,
        }
    }
}
