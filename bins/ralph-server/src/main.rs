//! ralph-server: runs a Ralph coding-agent loop over a task's PRD, the agent
//! in a pseudo-terminal, and serves the loop's JSON-RPC control protocol on a
//! Unix socket; plus the client commands that talk to it.
//!
//! This file only wires the command line to the configuration and the code
//! that runs it.

mod agent;
mod agent_loop;
mod client;
mod config;
mod injected;
mod lock;
mod methods;
mod progress;
mod prompt;
mod server;
mod state;
mod timestamp;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use ralph_server::{output, prd};
use rpc_core::cli::{self, LogArgs};
use rpc_core::daemon::{self, Threads};

use crate::config::{Config, RunArgs, SocketArgs};

/// Runs a Ralph agent loop over a task's PRD in a pseudo-terminal, and serves its
/// JSON-RPC control protocol on a Unix socket (<socket dir>/<task>.sock).
///
/// `run` exits 0 when the task completed, 3 when it stopped or was checkpointed,
/// 1 when it failed, 2 on bad configuration or when the task already runs.
#[derive(Debug, Parser)]
#[command(name = "ralph-server", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    sockets: SocketArgs,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the loop for one task directory, in the foreground.
    Run(RunArgs),
    /// Status of one task, or of every running one: exit 0 completed, 1 running,
    /// 2 failed or not found, 3 stopped or checkpointed.
    Status(client::status::StatusArgs),
    /// Watch a running task live: i interactive (Esc leaves), s stop, c checkpoint, q detach.
    Attach(client::attach::AttachArgs),
    /// Ask a running task to stop after the current agent run (--force: now).
    Stop(client::control::StopArgs),
    /// Ask a running task to checkpoint after the current agent run and exit (run resumes it).
    Checkpoint(client::control::TaskArg),
    /// Add instructions to the start of the next iteration's prompt.
    Inject(client::control::InjectArgs),
    /// Print a running task's output lines to stdout, for pipes.
    Tail(client::control::TaskArg),
    /// A Model Context Protocol server on stdio for AI agents: status, output, inject, stop,
    /// checkpoint of the running tasks, their progress.txt and prd.json as resources.
    Mcp(client::mcp::McpArgs),
    #[command(flatten)]
    Common(cli::CommonCommand),
}

fn main() -> ExitCode {
    // Before any thread exists: reading the local time zone is not thread-safe.
    timestamp::init();
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    if let Err(e) = cli.log.init() {
        return cli::bad_configuration(&e);
    }
    match cli.command {
        Command::Run(args) => run(args, &cli.sockets),
        Command::Status(args) => client::run(client::status::run(args, cli.sockets)),
        Command::Attach(args) => client::run(client::attach::run(args, cli.sockets)),
        Command::Stop(args) => client::run(client::control::stop(args, cli.sockets)),
        Command::Checkpoint(args) => client::run(client::control::checkpoint(args, cli.sockets)),
        Command::Inject(args) => client::run(client::control::inject(args, cli.sockets)),
        Command::Tail(args) => client::run(client::control::tail(args, cli.sockets)),
        Command::Mcp(args) => client::run(client::mcp::run(args, cli.sockets)),
        Command::Common(common) => common.run(Cli::command()),
    }
}

/// Runs the loop: exit code from its outcome, 2 for bad configuration.
fn run(args: RunArgs, sockets: &SocketArgs) -> ExitCode {
    let config = match Config::from_args(args, sockets) {
        Ok(config) => config,
        Err(e) => return cli::bad_configuration(&e),
    };
    daemon::run_to_exit("ralph-server", Threads::Workers(2), server::run(config))
}
