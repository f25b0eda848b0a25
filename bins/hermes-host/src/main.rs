//! hermes-host: a headless host for Hermes extensions editing HL7 v2
//! messages, and the client commands that talk to it.
//!
//! This file only wires the command line to the configuration and the code
//! that runs it.

mod client;
mod config;
mod control;
mod document;
mod errors;
mod events;
mod extension;
mod host;
mod methods;
mod server;
mod ui;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use hermes_host::hl7;
use rpc_core::cli::{self, LogArgs};
use rpc_core::daemon::{self, Threads};

use crate::config::{Config, ServeArgs};

/// A headless host for Hermes extensions: runs extension processes (JSON-RPC
/// over stdio, Content-Length framed), holds the HL7 v2 message they edit,
/// and serves a control socket to open messages, run commands and answer
/// dialogs.
///
/// Without a subcommand it runs the daemon (`serve`).
#[derive(Debug, Parser)]
#[command(name = "hermes-host", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the host and its extensions (the default).
    Serve(ServeArgs),
    /// Talk to a running host over its control socket.
    Ctl(client::CtlArgs),
    /// A Model Context Protocol server on stdio in front of the running host, for AI agents.
    Mcp(client::mcp::McpArgs),
    #[command(flatten)]
    Common(cli::CommonCommand),
}

fn main() -> ExitCode {
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    match cli.command {
        None => serve(cli.serve, &cli.log),
        Some(Command::Serve(args)) => serve(args, &cli.log),
        Some(Command::Ctl(args)) => client::run(args),
        Some(Command::Mcp(args)) => client::mcp::run(args),
        Some(Command::Common(common)) => common.run(Cli::command()),
    }
}

/// Runs the daemon: 0 after a clean stop, 1 after a runtime failure or a
/// forced stop, 2 for bad configuration.
fn serve(args: ServeArgs, log: &LogArgs) -> ExitCode {
    let config = match log.init().and_then(|()| Config::from_args(args)) {
        Ok(config) => config,
        Err(e) => return cli::bad_configuration(&e),
    };
    // One thread: an extension's request, its handler and its reply then run
    // on the thread that read it, with no wake-up of another (editor/getMessage
    // from one extension: 447k/s on two workers, 462k/s on one). Saving files
    // goes to the blocking pool.
    daemon::run_to_exit("hermes-host", Threads::One, server::run(config))
}
