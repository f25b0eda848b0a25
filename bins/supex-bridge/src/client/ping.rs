//! `supex-bridge ping`: a health check for scripts and service managers.
//!
//! Exit 0 when the server answers `ping` with `{"status": "ok"}`, which it
//! does only while its Ruby runtime runs; 3 when it answers but Ruby is not
//! available (a bridge that cannot evaluate is not healthy, but it is up:
//! the two call for different fixes); 1 when nothing answers in time.
//! A runtime that is still starting is waited for, within the timeout.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Server, address, connect, describe, request, tokio_runtime};
use crate::config::parse_seconds;

/// The exit code for "the daemon answers, its Ruby runtime does not run".
const RUNTIME_DOWN: u8 = 3;
/// How often to ask again while the runtime is starting.
const STARTING_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, clap::Args)]
pub struct PingArgs {
    /// Host of the bridge.
    #[arg(long, env = "SUPEX_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port of the bridge.
    #[arg(long, env = "SUPEX_PORT", default_value_t = 9876)]
    pub port: u16,
    /// Ping the REPL server instead of the bridge.
    #[arg(long)]
    pub repl: bool,
    /// Host of the REPL server (with --repl).
    #[arg(long, env = "SUPEX_REPL_HOST", default_value = "127.0.0.1")]
    pub repl_host: String,
    /// Port of the REPL server (with --repl).
    #[arg(long, env = "SUPEX_REPL_PORT", default_value_t = 4433)]
    pub repl_port: u16,
    /// How long to wait for the answer, in seconds (or a duration such as 500ms).
    #[arg(long, default_value = "5", value_parser = parse_seconds)]
    pub timeout: Duration,
}

enum Unhealthy {
    /// Nothing answered: not running, not reachable, or too slow.
    NoAnswer(String),
    /// The daemon answered; its Ruby runtime is not running.
    RuntimeDown { status: String, problem: Option<String> },
}

pub fn run(args: PingArgs) -> ExitCode {
    let (server, addr) = if args.repl {
        (Server::Repl, address(&args.repl_host, args.repl_port))
    } else {
        (Server::Bridge, address(&args.host, args.port))
    };
    let started = Instant::now();
    let deadline = started + args.timeout;
    let outcome = tokio_runtime().block_on(async {
        let peer = connect(server, &addr, args.timeout).await.map_err(Unhealthy::NoAnswer)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let reply = request(&peer, "ping", &json!({}), left)
                .await
                .map_err(|e| Unhealthy::NoAnswer(format!("{addr}: {}", describe(&e))))?;
            match reply["status"].as_str() {
                Some("ok") => return Ok(()),
                Some("starting") if Instant::now() + STARTING_POLL < deadline => {
                    tokio::time::sleep(STARTING_POLL).await
                }
                Some(status) => {
                    return Err(Unhealthy::RuntimeDown {
                        status: status.to_owned(),
                        problem: reply["problem"].as_str().map(str::to_owned),
                    });
                }
                None => return Err(Unhealthy::NoAnswer(format!("{addr}: unexpected answer {reply}"))),
            }
        }
    });
    match outcome {
        Ok(()) => {
            println!("ok: {addr} answered in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
            ExitCode::SUCCESS
        }
        Err(Unhealthy::NoAnswer(message)) => {
            eprintln!("supex-bridge ping: {message}");
            ExitCode::FAILURE
        }
        Err(Unhealthy::RuntimeDown { status, problem }) => {
            let why = problem.map(|p| format!(": {p}")).unwrap_or_default();
            eprintln!("supex-bridge ping: {addr} answers, but its Ruby runtime is {status}{why}");
            ExitCode::from(RUNTIME_DOWN)
        }
    }
}
