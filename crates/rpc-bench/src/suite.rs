//! The benchmark suite: every row of performance.md's table that has a daemon
//! to measure, each against its baseline from the same run.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::baseline;
use crate::load::{self, Load, Report};

#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Measured seconds per run.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Warm-up seconds per run (not measured).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Which benchmarks to run.
    #[arg(long, value_delimiter = ',', default_value = "b1,b2,b3,b4,b5,b8,b9")]
    only: Vec<String>,
    /// Connections for B8.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Also write the table, the machine and the command to this Markdown file.
    #[arg(long)]
    write: Option<PathBuf>,
}

struct Row {
    id: &'static str,
    what: String,
    baseline: String,
    measured: String,
    ratio: Option<f64>,
    target: &'static str,
    met: Option<bool>,
}

/// A daemon started for the suite; killed when dropped.
struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn start(bin: &str, env: &[(&str, String)], args: &[&str]) -> Result<Daemon> {
    let dir = std::env::current_exe()?.parent().context("binary directory")?.to_owned();
    let path = dir.join(bin);
    if !path.exists() {
        bail!("{} is not built (run `cargo build --release --workspace --bins`)", path.display());
    }
    let mut cmd = Command::new(&path);
    cmd.args(args).env("RUST_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Ok(Daemon { child: cmd.spawn().with_context(|| format!("starting {}", path.display()))? })
}

fn wait_for(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listening on {addr} after 20 s")
}

impl Options {
    fn wants(&self, id: &str) -> bool {
        self.only.iter().any(|o| o.eq_ignore_ascii_case(id))
    }

    fn load(&self, target: String, method: &str, params: &str, window: usize, connections: usize) -> Load {
        Load {
            target,
            method: method.to_owned(),
            params: params.to_owned(),
            window,
            connections,
            duration: Duration::from_secs_f64(self.seconds),
            warmup: Duration::from_secs_f64(self.warmup),
            hello: None,
        }
    }
}

async fn measure(label: &str, load: &Load) -> Result<Report> {
    let report = load::run(load).await.with_context(|| format!("{label} ({})", load.target))?;
    eprintln!("  {label:<40} {}", report.line());
    Ok(report)
}

fn throughput_row(
    id: &'static str,
    what: String,
    base: &Report,
    got: &Report,
    min_ratio: f64,
    target: &'static str,
) -> Row {
    let ratio = got.per_second / base.per_second;
    Row {
        id,
        what,
        baseline: format!("{:.0}/s", base.per_second),
        measured: format!("{:.0}/s", got.per_second),
        ratio: Some(ratio),
        target,
        met: Some(ratio >= min_ratio && got.errors == 0),
    }
}

pub async fn run(options: Options) -> Result<()> {
    let mut rows = Vec::new();
    // Baselines run as processes of their own, like the daemons: sharing the
    // load generator's runtime would make their round trips unfairly short.
    let echo = free_addr();
    let _echo = start("rpc-bench", &[], &["echo-server", "--addr", &echo.to_string()])?;
    wait_for(echo)?;

    let bridge_addr = free_addr();
    let _bridge = if options.wants("b1") || options.wants("b4") || options.wants("b9") || options.wants("b5") {
        let project = std::env::temp_dir().join(format!("rpc-bench-supex-{}", std::process::id()));
        std::fs::create_dir_all(&project)?;
        let daemon = start(
            "supex-bridge",
            &[
                ("SUPEX_HOST", "127.0.0.1".into()),
                ("SUPEX_PORT", bridge_addr.port().to_string()),
                ("SUPEX_REPL_DISABLED", "1".into()),
                ("SUPEX_PROJECT_ROOT", project.display().to_string()),
                ("SUPEX_MAX_CONNECTIONS", "1024".into()),
            ],
            &[],
        )?;
        wait_for(bridge_addr)?;
        Some(daemon)
    } else {
        None
    };

    let broker_addr = free_addr();
    let broker = start(
        "btcp-broker",
        &[
            ("BTCP_HOST", "127.0.0.1".into()),
            ("BTCP_PORT", broker_addr.port().to_string()),
            ("BTCP_RATE_LIMIT", "100000000".into()),
            ("BTCP_MAX_SESSIONS", "100000".into()),
        ],
        &[],
    )?;
    wait_for(broker_addr)?;
    let broker_pid = broker.child.id();
    let ws_agent = format!("ws://{broker_addr}/ws?clientType=agent");

    let jsonrpsee_addr = free_addr();
    let _jsonrpsee = start("rpc-bench", &[], &["jsonrpsee-server", "--addr", &jsonrpsee_addr.to_string()])?;
    wait_for(jsonrpsee_addr)?;

    if options.wants("b1") {
        eprintln!("B1: supex-bridge ping over TCP NDJSON vs raw echo");
        for conns in [1, 8] {
            let base = measure(
                &format!("echo, {conns} conn"),
                &options.load(format!("tcp://{echo}"), "ping", "{}", 64, conns),
            )
            .await?;
            let got = measure(
                &format!("supex-bridge ping, {conns} conn"),
                &options.load(format!("tcp://{bridge_addr}"), "ping", "{}", 64, conns),
            )
            .await?;
            rows.push(throughput_row(
                "B1",
                format!("supex-bridge `ping`, window 64, {conns} conn"),
                &base,
                &got,
                0.5,
                "≥ 0.5 × echo",
            ));
        }
    }

    let mut broker_ping = Vec::new();
    if options.wants("b2") || options.wants("b3") {
        eprintln!("B2: btcp-broker ping over WebSocket vs jsonrpsee");
        for conns in [1, 8] {
            let base = measure(
                &format!("jsonrpsee ping, {conns} conn"),
                &options.load(format!("ws://{jsonrpsee_addr}"), "ping", "{}", 64, conns),
            )
            .await?;
            let got = measure(
                &format!("btcp-broker ping, {conns} conn"),
                &options.load(ws_agent.clone(), "ping", "{}", 64, conns),
            )
            .await?;
            if options.wants("b2") {
                rows.push(throughput_row(
                    "B2",
                    format!("btcp-broker `ping` (WS), window 64, {conns} conn"),
                    &base,
                    &got,
                    4.0,
                    "≥ 4 × jsonrpsee",
                ));
            }
            broker_ping.push(got);
        }
    }

    if options.wants("b3") {
        eprintln!("B3: forwarded tools/call vs broker ping");
        let _browser = baseline::btcp_browser(&format!("ws://{broker_addr}"), "bench").await?;
        let target = format!("ws://{broker_addr}/ws?clientType=agent&sessionId=bench");
        for (i, conns) in [1, 8].into_iter().enumerate() {
            let got = measure(
                &format!("forwarded tools/call, {conns} conn"),
                &options.load(target.clone(), "tools/call", r#"{"name":"echo","arguments":{}}"#, 64, conns),
            )
            .await?;
            rows.push(throughput_row(
                "B3",
                format!("btcp-broker forwarded `tools/call`, {conns} conn"),
                &broker_ping[i],
                &got,
                0.4,
                "≥ 0.4 × broker ping",
            ));
        }
    }

    if options.wants("b4") {
        eprintln!("B4: round trip at window 1 vs raw echo");
        let base = measure("echo RTT", &options.load(format!("tcp://{echo}"), "ping", "{}", 1, 1)).await?;
        for (name, target) in [("supex-bridge", format!("tcp://{bridge_addr}")), ("btcp-broker", ws_agent.clone())] {
            let got = measure(&format!("{name} RTT"), &options.load(target, "ping", "{}", 1, 1)).await?;
            for (q, b, g) in [("p50", base.p50_us, got.p50_us), ("p99", base.p99_us, got.p99_us)] {
                let ratio = g / b;
                rows.push(Row {
                    id: "B4",
                    what: format!("{name} `ping` RTT {q}, window 1"),
                    baseline: format!("{b:.1} µs"),
                    measured: format!("{g:.1} µs"),
                    ratio: Some(ratio),
                    target: "≤ 1.3 × echo",
                    met: Some(ratio <= 1.3),
                });
            }
        }
    }

    if options.wants("b5") {
        eprintln!("B5: eval_ruby of 1+1 through supex-bridge vs its driver over a bare pipe");
        let ruby = std::env::var("SUPEX_RUBY").unwrap_or_else(|_| "ruby".into());
        match baseline::ruby_pipe_eval(&ruby, Duration::from_secs_f64(options.seconds), Duration::from_secs_f64(options.warmup)).await {
            Ok(base) => {
                eprintln!("  {:<40} {}", "driver over a bare pipe", base.line());
                let mut load = options.load(format!("tcp://{bridge_addr}"), "tools/call", r#"{"name":"eval_ruby","arguments":{"code":"1+1"}}"#, 1, 1);
                load.hello = Some(("hello".into(), r#"{"name":"rpc-bench","version":"1","agent":"rpc-bench","pid":1}"#.into()));
                let got = measure("supex-bridge eval_ruby 1+1", &load).await?;
                let ratio = got.p50_us / base.p50_us;
                rows.push(Row {
                    id: "B5",
                    what: "`eval_ruby` of `1+1`, p50 latency".into(),
                    baseline: format!("{:.1} µs", base.p50_us),
                    measured: format!("{:.1} µs", got.p50_us),
                    ratio: Some(ratio),
                    target: "≤ 1.5 × bare pipe",
                    met: Some(ratio <= 1.5 && got.errors == 0),
                });
            }
            Err(e) => eprintln!("  skipped: {e:#} (is Ruby installed? SUPEX_RUBY={ruby})"),
        }
    }

    if options.wants("b8") {
        eprintln!("B8: {} idle WebSocket connections", options.idle);
        let before = baseline::rss_mib(broker_pid).unwrap_or(0.0);
        let idle = baseline::IdleConnections::open(&ws_agent, options.idle).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = baseline::rss_mib(broker_pid).unwrap_or(f64::NAN);
        let answered = idle.ping_all().await;
        eprintln!(
            "  broker RSS {before:.1} MiB idle -> {rss:.1} MiB with {} connections; {answered} answered ping",
            options.idle
        );
        rows.push(Row {
            id: "B8",
            what: format!("btcp-broker holding {} idle WS connections", options.idle),
            baseline: format!("{before:.1} MiB at start"),
            measured: format!("{rss:.1} MiB RSS, {answered}/{} answer ping", options.idle),
            ratio: None,
            target: "≤ 200 MiB, all answer",
            met: Some(rss <= 200.0 && answered == options.idle),
        });
        drop(idle);
    }

    if options.wants("b9") {
        eprintln!("B9: cost curve");
        for (name, target) in [("supex-bridge", format!("tcp://{bridge_addr}")), ("btcp-broker", ws_agent.clone())] {
            let mut points = Vec::new();
            for conns in [1, 8, 64, 512] {
                let got = measure(
                    &format!("{name} ping, {conns} conn"),
                    &options.load(target.clone(), "ping", "{}", 64, conns),
                )
                .await?;
                points.push((conns, got.per_second));
            }
            let peak = points.iter().map(|p| p.1).fold(0.0, f64::max);
            let last = points.last().unwrap().1;
            rows.push(Row {
                id: "B9",
                what: format!("{name} `ping` at 1/8/64/512 conns"),
                baseline: "–".into(),
                measured: points.iter().map(|(c, t)| format!("{c}: {t:.0}/s")).collect::<Vec<_>>().join(", "),
                ratio: Some(last / peak),
                target: "no fall as conns grow",
                // "Does not fall": the 512-connection point keeps 90% of the best.
                met: Some(last >= 0.9 * peak),
            });
        }
    }

    let table = render(&rows);
    println!("{table}");
    if let Some(path) = &options.write {
        std::fs::write(path, document(&table, &options)).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn render(rows: &[Row]) -> String {
    let mut out =
        String::from("| id | what | baseline | measured | ratio | target | met |\n|---|---|---|---|---|---|---|\n");
    for r in rows {
        let ratio = r.ratio.map_or("–".to_owned(), |x| format!("{x:.2}"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.id, r.what, r.baseline, r.measured, ratio, r.target, met
        );
    }
    out
}

fn document(table: &str, options: &Options) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "# Benchmarks\n\nThe latest run of `rpc-bench suite` (performance.md). Every number is from one run on one \
         machine, client and servers sharing it; compare ratios, not absolute values.\n\n\
         - machine: {cores} cores, {cpu}, Linux {kernel}\
         - command: `cargo build --release --workspace --bins && ./target/release/rpc-bench suite --seconds {} --warmup {} --only {} --write BENCHMARKS.md`\n\n{table}",
        options.seconds,
        options.warmup,
        options.only.join(","),
    )
}
