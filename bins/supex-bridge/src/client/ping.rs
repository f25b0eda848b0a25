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

use super::connection::{Server, address, connect, describe, request};
use crate::config::PingArgs;

/// The exit code for "the daemon answers, its Ruby runtime does not run".
const RUNTIME_DOWN: u8 = 3;
/// How often to ask again while the runtime is starting.
const STARTING_POLL: Duration = Duration::from_millis(100);

enum Unhealthy {
    /// Nothing answered: not running, not reachable, or too slow.
    NoAnswer(String),
    /// The daemon answered; its Ruby runtime is not running.
    RuntimeDown { status: String, problem: Option<String> },
}

pub fn run(args: PingArgs) -> ExitCode {
    rpc_core::cli::run_client(ping(args))
}

async fn ping(args: PingArgs) -> Result<ExitCode, String> {
    let (server, addr) = if args.repl {
        (Server::Repl, address(&args.repl_host, args.repl_port))
    } else {
        (Server::Bridge, address(&args.host, args.port))
    };
    let started = Instant::now();
    match ask(server, &addr, started + args.timeout, args.timeout).await {
        Ok(()) => {
            println!("ok: {addr} answered in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
            Ok(ExitCode::SUCCESS)
        }
        Err(Unhealthy::NoAnswer(message)) => Err(message),
        // Not a failure of the command: the answer a health check asked for.
        Err(Unhealthy::RuntimeDown { status, problem }) => {
            let why = problem.map(|p| format!(": {p}")).unwrap_or_default();
            eprintln!("supex-bridge: {addr} answers, but its Ruby runtime is {status}{why}");
            Ok(ExitCode::from(RUNTIME_DOWN))
        }
    }
}

/// Asks `ping` until the runtime is no longer starting, or `deadline`.
async fn ask(server: Server, addr: &str, deadline: Instant, timeout: Duration) -> Result<(), Unhealthy> {
    let peer = connect(server, addr, timeout).await.map_err(Unhealthy::NoAnswer)?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let reply = request(&peer, "ping", &json!({}), left)
            .await
            .map_err(|e| Unhealthy::NoAnswer(format!("{addr}: {}", describe(&e))))?;
        match reply["status"].as_str() {
            Some("ok") => return Ok(()),
            Some("starting") if Instant::now() + STARTING_POLL < deadline => tokio::time::sleep(STARTING_POLL).await,
            Some(status) => {
                return Err(Unhealthy::RuntimeDown {
                    status: status.to_owned(),
                    problem: reply["problem"].as_str().map(str::to_owned),
                });
            }
            None => return Err(Unhealthy::NoAnswer(format!("{addr}: unexpected answer {reply}"))),
        }
    }
}
