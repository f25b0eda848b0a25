//! B7: how long a line the agent writes to its terminal takes to reach
//! ralph-server's subscribers as an `output` event, and whether a thousand
//! subscribers, one of which never reads, slow the loop down.
//!
//! The agent is this program, `rpc-bench ralph-agent`, run by ralph-server for
//! one iteration. Once the suite's subscribers are in place (it creates the
//! go file) the agent writes paced lines stamped with CLOCK_MONOTONIC, one
//! clock for every process on the machine, and each subscriber takes the
//! difference when the event arrives. Then it floods the terminal and reports
//! how many lines a second it got through: a terminal's writer blocks while
//! its reader lags, so that is the loop's pace. The flood is timed between two
//! points where the terminal's buffers are equally full (after a warm-up, and
//! at the end), so what sits in them does not count.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use nix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::daemon;
use crate::load::Report;
use crate::pin;

/// Every line of the agent starts with it.
const TAG: &[u8] = b"rpcbench ";
const SUBSCRIBE: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscribe\",\"params\":{\"events\":[\"output\"]}}\n";

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
    lines: u64,
    #[arg(long, default_value_t = 100)]
    warmup_lines: u64,
    /// Between two paced lines.
    #[arg(long, default_value_t = 5000)]
    interval_us: u64,
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
struct Flood {
    lines: u64,
    seconds: f64,
    per_second: f64,
}

/// Nanoseconds on CLOCK_MONOTONIC, the clock the agent and subscribers share.
fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The agent: paced stamped lines, then a flood, then `rpcbench D` and exit.
pub fn agent(args: AgentArgs) -> Result<()> {
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

/// What one subscriber saw.
struct Tally {
    /// Paced line → event, nanoseconds.
    hist: Histogram<u64>,
    /// Events the server told it it had lost (`dropped {count}`).
    dropped: u64,
}

impl Tally {
    /// Counts one line from the server; true at the agent's last line.
    fn line(&mut self, line: &[u8], now: u64) -> bool {
        if let Some(at) = memchr::memmem::find(line, TAG) {
            let rest = &line[at + TAG.len()..];
            match rest.first() {
                Some(b'L') => {
                    if let Some(stamp) = number_after(rest, 2) {
                        let _ = self.hist.record(now.saturating_sub(stamp));
                    }
                }
                Some(b'D') => return true,
                _ => {}
            }
        } else if memchr::memmem::find(line, b"\"type\":\"dropped\"").is_some()
            && let Some(at) = memchr::memmem::find(line, b"\"count\":")
        {
            self.dropped += number_after(&line[at + 8..], 0).unwrap_or(0);
        }
        false
    }
}

/// The number that is word `skip` (0-based, split at spaces) of `text`.
fn number_after(text: &[u8], skip: usize) -> Option<u64> {
    let word = text.split(|&b| b == b' ').nth(skip)?;
    let digits = word.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&word[..digits]).ok()?.parse().ok()
}

/// Connects and subscribes to `output`; returns the stream and what came
/// after the reply.
async fn subscribe(socket: &Path) -> Result<(UnixStream, Vec<u8>)> {
    let mut stream =
        UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
    stream.write_all(SUBSCRIBE).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("ralph-server closed the connection before answering subscribe");
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = memchr::memchr(b'\n', &buf) {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if memchr::memmem::find(&line, b"\"id\":1").is_some() {
                if memchr::memmem::find(&line, b"\"subscribed\"").is_none() {
                    bail!("subscribe failed: {}", String::from_utf8_lossy(&line));
                }
                return Ok((stream, buf));
            }
        }
    }
}

/// Reads events until the agent's last line or the server goes away.
async fn read_events(mut stream: UnixStream, mut buf: Vec<u8>) -> Result<Tally> {
    let mut tally = Tally { hist: Histogram::new(3)?, dropped: 0 };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        let now = monotonic_ns();
        if n == 0 {
            return Ok(tally);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        let mut done = false;
        while let Some(end) = memchr::memchr(b'\n', &buf[start..]) {
            done |= tally.line(&buf[start..start + end], now);
            start += end + 1;
        }
        buf.drain(..start);
        if done {
            return Ok(tally);
        }
    }
}

/// The suite's side of B7: one ralph-server per round, each with a fresh task.
pub struct RalphBench {
    root: PathBuf,
    agent: Vec<String>,
    cores: Option<pin::Cores>,
    timeout: Duration,
    rounds: usize,
}

/// How many subscribers a round has.
#[derive(Clone, Copy, Debug)]
pub struct Subscribers {
    pub count: usize,
    /// The first one subscribes and then never reads.
    pub one_stalled: bool,
}

impl RalphBench {
    pub fn new(seconds: f64, warmup: f64, cores: Option<pin::Cores>) -> Result<RalphBench> {
        let root = std::env::temp_dir().join(format!("rpc-bench-ralph-{}", std::process::id()));
        std::fs::create_dir_all(&root)?;
        let args = AgentArgs::default_for(seconds, warmup);
        let paced = Duration::from_micros(args.interval_us).mul_f64((args.lines + args.warmup_lines) as f64);
        let mut agent = vec![
            daemon::sibling("rpc-bench")?.display().to_string(),
            "ralph-agent".into(),
            "--lines".into(),
            args.lines.to_string(),
            "--warmup-lines".into(),
            args.warmup_lines.to_string(),
            "--interval-us".into(),
            args.interval_us.to_string(),
            "--seconds".into(),
            seconds.to_string(),
            "--warmup".into(),
            warmup.to_string(),
        ];
        if let Some(cores) = cores {
            agent.extend(["--cpu".into(), cores.load.to_string()]);
        }
        let timeout = paced + Duration::from_secs_f64(seconds + warmup + 30.0);
        Ok(RalphBench { root, agent, cores, timeout, rounds: 0 })
    }

    /// One run of ralph-server with `subscribers`: the latency percentiles of
    /// every reading subscriber's paced lines together (`requests` samples,
    /// `errors` events they lost) and the flood's pace (`per_second`).
    pub fn round(&mut self, subscribers: Subscribers) -> Result<Report> {
        self.rounds += 1;
        let run = self.root.join(format!("round-{}", self.rounds));
        let task = run.join("bench");
        let sockets = run.join("sockets");
        std::fs::create_dir_all(&task)?;
        std::fs::write(
            task.join("prd.json"),
            r#"{"project": "bench", "branchName": "bench", "userStories": [{"id": "US-001", "title": "Print lines", "priority": 1, "passes": false}]}"#,
        )?;
        let (go, report) = (run.join("go"), run.join("flood.json"));
        let quote = |s: &str| format!("'{s}'");
        let mut command: Vec<String> = self.agent.iter().map(|w| quote(w)).collect();
        command.extend(["--go".into(), quote(&go.display().to_string())]);
        command.extend(["--report".into(), quote(&report.display().to_string()), "{PROMPT_FILE}".into()]);
        let env = [
            ("RALPH_SOCKET_DIR", sockets.display().to_string()),
            ("RALPH_MAX_ITERATIONS", "1".into()),
            ("RALPH_MAX_CONNECTIONS", (subscribers.count + 64).to_string()),
            ("RALPH_PROJECT_ROOT", task.display().to_string()),
        ];
        let task_arg = task.display().to_string();
        let command = command.join(" ");
        let mut server = daemon::start_on(
            "ralph-server",
            &env,
            &["run", &task_arg, "--agent-cmd", &command],
            self.cores.map(|c| c.server),
        )?;
        let socket = sockets.join("bench.sock");
        let (load_core, timeout) = (self.cores.map(|c| c.load), self.timeout);
        let tallies = std::thread::spawn(move || -> Result<Vec<Tally>> {
            if let Some(cpu) = load_core {
                pin::pin_current_thread(cpu)?;
            }
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(subscribe_and_read(&socket, &go, subscribers, timeout))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the subscribers' thread panicked"))??;
        let flood = wait_flood(&report, self.timeout)?;
        if server.wait_exit(Duration::from_secs(30)).is_none() {
            eprintln!("  ralph-server did not exit within 30 s of its one iteration; stopping it");
        }
        drop(server);
        let _ = std::fs::remove_dir_all(&run);
        let mut hist = Histogram::<u64>::new(3)?;
        let mut dropped = 0;
        for tally in &tallies {
            hist.add(&tally.hist)?;
            dropped += tally.dropped;
        }
        let mut report = Report::from_histogram(&hist, hist.len(), dropped, flood.seconds);
        report.per_second = flood.per_second;
        Ok(report)
    }
}

impl Drop for RalphBench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl AgentArgs {
    /// The suite's settings: 100 + 1000 paced lines, one each 5 ms (an agent
    /// printing 200 lines a second; with 999 readers that is 200 000 events a
    /// second, what two cores can carry without the fan-out falling behind).
    fn default_for(seconds: f64, warmup: f64) -> AgentArgs {
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

/// Connects the subscribers (the stalled one first: the worst place for it),
/// lets the agent go, and reads until its last line.
async fn subscribe_and_read(socket: &Path, go: &Path, subs: Subscribers, timeout: Duration) -> Result<Vec<Tally>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if Instant::now() > deadline {
            bail!("no ralph-server socket at {} after 20 s", socket.display());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut stalled = None;
    let mut readers = Vec::new();
    for i in 0..subs.count {
        let (stream, buf) = subscribe(socket).await?;
        if subs.one_stalled && i == 0 {
            stalled = Some(stream);
        } else {
            readers.push(tokio::spawn(read_events(stream, buf)));
        }
    }
    std::fs::write(go, "")?;
    let mut tallies = Vec::new();
    let until = tokio::time::Instant::now() + timeout;
    for reader in readers {
        let tally =
            tokio::time::timeout_at(until, reader).await.context("a subscriber never saw the agent's end")???;
        tallies.push(tally);
    }
    drop(stalled);
    Ok(tallies)
}

fn wait_flood(path: &Path, timeout: Duration) -> Result<Flood> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read(path) {
            return Ok(serde_json::from_slice(&text)?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the agent wrote no flood report within {timeout:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_lines_are_timed_and_dropped_counts_added() {
        let mut tally = Tally { hist: Histogram::new(3).unwrap(), dropped: 0 };
        let event = br#"{"jsonrpc":"2.0","method":"event","params":{"type":"output","timestamp":"t","data":{"line":"rpcbench L 7 1000\r"}}}"#;
        assert!(!tally.line(event, 4000));
        assert_eq!((tally.hist.len(), tally.hist.min()), (1, 3000));
        let dropped =
            br#"{"jsonrpc":"2.0","method":"event","params":{"type":"dropped","timestamp":"t","data":{"count":42}}}"#;
        assert!(!tally.line(dropped, 0));
        assert_eq!(tally.dropped, 42);
        assert!(tally.line(br#"{"params":{"data":{"line":"rpcbench D"}}}"#, 0));
    }
}
