//! The suite's side of B7: a ralph-server per round, started with
//! `rpc-bench ralph-agent` as its agent, and the round's subscribers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hdrhistogram::Histogram;

use crate::daemon;
use crate::load::Report;
use crate::pin;

use super::agent::{AgentArgs, Flood};
use super::subscribers::{Subscribers, Tally, subscribe_and_read};

/// The suite's side of B7: one ralph-server per round, each with a fresh task.
pub struct RalphBench {
    root: PathBuf,
    agent: Vec<String>,
    cores: Option<pin::Cores>,
    timeout: Duration,
    rounds: usize,
    /// The agent's timed lines: what each subscriber makes room for.
    lines: usize,
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
        Ok(RalphBench { root, agent, cores, timeout, rounds: 0, lines: args.lines as usize })
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
        let (load_core, timeout, lines) = (self.cores.map(|c| c.load), self.timeout, self.lines);
        let tallies = std::thread::spawn(move || -> Result<Vec<Tally>> {
            if let Some(cpu) = load_core {
                pin::pin_current_thread(cpu)?;
            }
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(subscribe_and_read(&socket, &go, subscribers, lines, timeout))
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
            for &sample in &tally.samples {
                hist.record(sample)?;
            }
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
