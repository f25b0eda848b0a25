//! rpc-bench: drives the real daemons over real sockets and measures them
//! against baselines run on the same machine in the same run. Benchmarks are
//! not tests: this prints numbers; `suite` also says which of the project's
//! targets (B1-B10, listed in BENCHMARKS.md) were met.
//!
//! From the bottom up: `pin.rs` (cores), `load.rs` (the load generator),
//! `daemon.rs` (the processes the suite starts), `baseline.rs` (the servers
//! the daemons are measured against); `hermes/` and `ralph/` (B6's and B7's
//! programs and drivers, which need more than a load); `suite/` (every
//! benchmark, one file each, and the table). This file only wires the
//! sub-commands to them.

mod baseline;
mod daemon;
mod hermes;
mod load;
mod pin;
mod ralph;
mod suite;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rpc-bench", version, about = "Load generator and same-run baselines for the daemons")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pipelined load against one target; prints throughput and latency percentiles.
    Load {
        /// `tcp://HOST:PORT` (NDJSON) or `ws://HOST:PORT/PATH?QUERY`.
        target: String,
        #[arg(long, default_value = "ping")]
        method: String,
        /// Params as JSON.
        #[arg(long, default_value = "{}")]
        params: String,
        /// Requests in flight per connection.
        #[arg(long, default_value_t = 64)]
        window: usize,
        /// Connections opened to the target.
        #[arg(long, default_value_t = 1)]
        connections: usize,
        /// Measured seconds, after the warm-up.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Warm-up seconds before measuring (not measured).
        #[arg(long, default_value_t = 1.0)]
        warmup: f64,
        /// A request sent (and answered) on each connection before the load, as
        /// `METHOD PARAMS_JSON`, e.g. `hello '{"name":"b","version":"1","agent":"b","pid":1}'`.
        #[arg(long, num_args = 2, value_names = ["METHOD", "PARAMS"])]
        hello: Option<Vec<String>>,
        /// Match every reply to its request by id and time every round trip
        /// (the default at window 1); otherwise replies are counted and one
        /// round trip in 16 is timed.
        #[arg(long)]
        exact: bool,
        /// Process ids of the server, whose CPU share is reported.
        #[arg(long, value_delimiter = ',')]
        server_pid: Vec<u32>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the raw NDJSON echo server baseline (no JSON parsing).
    EchoServer {
        #[arg(long, default_value = "127.0.0.1:7000")]
        addr: SocketAddr,
    },
    /// Run the raw WebSocket echo server baseline (text frames back, no JSON).
    WsEchoServer {
        #[arg(long, default_value = "127.0.0.1:7002")]
        addr: SocketAddr,
    },
    /// Run the jsonrpsee WebSocket server baseline with a `ping` method.
    JsonrpseeServer {
        #[arg(long, default_value = "127.0.0.1:7001")]
        addr: SocketAddr,
    },
    /// Run rpc-core alone serving `ping` (NDJSON on --addr, WebSocket on --ws-addr).
    CoreServer {
        #[arg(long, default_value = "127.0.0.1:7002")]
        addr: SocketAddr,
        #[arg(long, default_value = "127.0.0.1:7003")]
        ws_addr: SocketAddr,
    },
    /// Act as a BTCP browser with an `echo` tool that answers at once.
    BrowserStub {
        /// Broker base URL, e.g. ws://127.0.0.1:8765
        #[arg(long, default_value = "ws://127.0.0.1:8765")]
        url: String,
        #[arg(long, default_value = "bench")]
        session: String,
    },
    /// Open many idle WebSocket connections, then ping each of them.
    Idle {
        url: String,
        #[arg(long, default_value_t = 10_000)]
        count: usize,
    },
    /// Every benchmark target (B1-B10): starts the daemons and baselines, runs
    /// every benchmark, prints the table (and writes it with --write).
    Suite(suite::Options),
    /// B6's extension, started by hermes-host (or wired to the echo).
    #[command(hide = true)]
    HermesExtension(hermes::extension::ExtensionArgs),
    /// B6's baseline: stdin back to stdout, unread.
    #[command(hide = true)]
    ContentLengthEcho {
        #[arg(long)]
        cpu: Option<usize>,
    },
    /// B7's agent, started by ralph-server.
    #[command(hide = true)]
    RalphAgent(ralph::agent::AgentArgs),
    #[command(flatten)]
    Common(rpc_core::cli::CommonCommand),
}

/// The man page's EXIT STATUS section.
const EXIT_STATUS: &str = "0: the benchmarks ran (or the helper process ended cleanly).\n\n1: a benchmark could not run or a helper failed; the error is printed.\n\n2: bad usage.";

fn main() -> Result<ExitCode> {
    // Inherited by the daemons the suite starts.
    rpc_core::listen::raise_fd_limit();
    // The processes the daemons start pin themselves to a core first, so they
    // run without an async runtime (whose threads would already be placed).
    match Cli::parse().command {
        Command::Common(common) => return Ok(common.run(Cli::command(), EXIT_STATUS)),
        Command::HermesExtension(args) => hermes::extension::run(args)?,
        Command::ContentLengthEcho { cpu } => hermes::pipe::echo(cpu)?,
        Command::RalphAgent(args) => ralph::agent::run(args)?,
        Command::Suite(options) => {
            // The load side on one core, every server on the other: pinned
            // before the runtime exists, so its thread inherits the core. One
            // thread, since two workers on one core would only take turns.
            let cores = pin::Cores::pick();
            let runtime = match cores {
                Some(cores) => {
                    pin::pin_current_thread(cores.load)?;
                    tokio::runtime::Builder::new_current_thread().enable_all().build()?
                }
                None => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
            };
            runtime.block_on(suite::run(options, cores))?
        }
        command => tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(command))?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn run(command: Command) -> Result<()> {
    match command {
        Command::Load {
            target,
            method,
            params,
            window,
            connections,
            seconds,
            warmup,
            hello,
            exact,
            server_pid,
            json,
        } => {
            let load = load::Load {
                target,
                method,
                params,
                window,
                connections,
                duration: Duration::from_secs_f64(seconds),
                warmup: Duration::from_secs_f64(warmup),
                hello: hello.map(|h| (h[0].clone(), h[1].clone())),
                exact: exact || window == 1,
                servers: server_pid,
            };
            let measured = load::measure(&load).await?;
            if json {
                println!("{}", serde_json::to_string(&measured)?);
            } else {
                let busy = &measured.busy;
                let server = busy.server.map(|s| format!(", server {:.0}%", s * 100.0)).unwrap_or_default();
                println!("{}  (busy: load side {:.0}%{server})", measured.report.line(), busy.load * 100.0);
            }
        }
        Command::EchoServer { addr } => {
            let addr = baseline::echo_server(addr).await?;
            eprintln!("echo server on {addr}");
            std::future::pending::<()>().await;
        }
        Command::WsEchoServer { addr } => {
            let addr = baseline::ws_echo_server(addr).await?;
            eprintln!("WebSocket echo server on ws://{addr}");
            std::future::pending::<()>().await;
        }
        Command::JsonrpseeServer { addr } => {
            let (addr, handle) = baseline::jsonrpsee_server(addr).await?;
            eprintln!("jsonrpsee server on ws://{addr}");
            handle.stopped().await;
        }
        Command::CoreServer { addr, ws_addr } => {
            let (ndjson, ws) = baseline::core_servers(addr, ws_addr).await?;
            eprintln!("rpc-core ping on tcp://{ndjson} and ws://{ws}");
            std::future::pending::<()>().await;
        }
        Command::BrowserStub { url, session } => {
            let peer = baseline::btcp_browser(&url, &session).await?;
            eprintln!("browser of session {session} registered `echo`");
            peer.closed().await;
        }
        Command::Idle { url, count } => {
            let idle = baseline::IdleConnections::open(&url, count).await?;
            let answered = idle.ping_all().await;
            println!("{answered} of {count} connections answered ping");
        }
        Command::Suite(_)
        | Command::HermesExtension(_)
        | Command::ContentLengthEcho { .. }
        | Command::RalphAgent(_)
        | Command::Common(_) => unreachable!("run by main, with a runtime of its own or none"),
    }
    Ok(())
}
