//! `supex-bridge ping`: a health check for scripts and service managers. Exit
//! 0 when the server answers `ping` with `{"status": "ok"}` in time, else 1.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Server, address, connect, describe, request, tokio_runtime};
use crate::config::parse_seconds;

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
    /// How long to wait for the answer (seconds or a duration).
    #[arg(long, default_value = "5", value_parser = parse_seconds)]
    pub timeout: Duration,
}

pub fn run(args: PingArgs) -> ExitCode {
    let (server, addr) = if args.repl {
        (Server::Repl, address(&args.repl_host, args.repl_port))
    } else {
        (Server::Bridge, address(&args.host, args.port))
    };
    let started = Instant::now();
    let outcome = tokio_runtime().block_on(async {
        let peer = connect(server, &addr, args.timeout).await?;
        let reply =
            request(&peer, "ping", &json!({}), args.timeout).await.map_err(|e| format!("{addr}: {}", describe(&e)))?;
        if reply["status"] == "ok" { Ok(()) } else { Err(format!("{addr}: unexpected answer {reply}")) }
    });
    match outcome {
        Ok(()) => {
            println!("ok: {addr} answered in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("supex-bridge ping: {message}");
            ExitCode::FAILURE
        }
    }
}
