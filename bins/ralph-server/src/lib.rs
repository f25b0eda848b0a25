//! ralph-server: runs a Ralph coding-agent loop over a task's PRD, the agent
//! in a pseudo-terminal, and serves the loop's JSON-RPC control protocol on a
//! Unix socket; plus the client commands that talk to it.
//!
//! This file owns every module (the binary and the fuzz targets use the same
//! tree) and wires the command line to the code that runs each subcommand.
//! Nothing is public but `main` and `fuzzing`: this is not an API for
//! other crates.
//!
//! From the bottom up: what the agent writes is read by `prd` and
//! `output`; the shared state is `state`; the control protocol's method
//! tables are `methods`; the loop is `agent_loop`, running `agent`;
//! `server` wires them together for `run`; `client` holds the client
//! commands.

mod agent;
mod agent_loop;
mod client;
mod client_runtime;
mod config;
mod errors;
mod files;
mod injected;
mod lock;
mod methods;
mod output;
mod prd;
mod progress;
mod prompt;
mod server;
mod state;
mod terminal;
mod timestamp;

#[doc(hidden)]
pub mod fuzzing;

use std::process::ExitCode;

use clap::CommandFactory;
use rpc_core::cli::{self, run_client};
use rpc_core::daemon::Threads;

use crate::config::{Cli, Command, Config, RunArgs, SocketArgs};

/// Parses the command line and runs the subcommand; its exit code.
pub fn main() -> ExitCode {
    // Before any thread exists: reading the local time zone is not thread-safe.
    timestamp::init();
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    if let Err(e) = cli.log.init() {
        return cli::bad_configuration(&e);
    }
    let sockets = cli.sockets;
    match cli.command {
        Command::Run(args) => run(args, &sockets),
        Command::Status(args) => run_client(client::status::run(args, sockets)),
        Command::Attach(args) => run_client(client::attach::run(args, sockets)),
        Command::Stop(args) => run_client(client::control::stop(args, sockets)),
        Command::Checkpoint(args) => run_client(client::control::checkpoint(args, sockets)),
        Command::Inject(args) => run_client(client::control::inject(args, sockets)),
        Command::Tail(args) => run_client(client::control::tail(args, sockets)),
        Command::Mcp(args) => run_client(client::mcp::run(args, sockets)),
        Command::Common(common) => common.run(Cli::command(), config::EXIT_STATUS),
    }
}

/// `run`: the loop, its exit code from its outcome; 2 for bad configuration.
fn run(args: RunArgs, sockets: &SocketArgs) -> ExitCode {
    cli::run_daemon("ralph-server", Threads::Workers(2), Config::from_args(args, sockets), server::run)
}
