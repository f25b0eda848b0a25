//! hermes-host: a headless host for Hermes extensions editing HL7 v2
//! messages, and the client commands that talk to it.
//!
//! The tree, from the bottom up: the HL7 message ([`hl7`]) and the document
//! that holds it (`document`); one configured extension (`extension`);
//! where dialogs go (`dialog_route`); the state every connection shares
//! (`state`). Above the state: what runs the extensions' processes
//! (`extension::supervisor`, `extension::lineup`), what tells them and
//! subscribers of changes (`events`), and the method tables extensions and
//! control clients call (`methods`). On top, the wiring (`server`, and the
//! editor page it serves, `web`). Beside
//! them: the command line and settings (`config`), the error codes
//! (`errors`), the client subcommands (`client`).
//!
//! Only [`hl7`] and the fuzz targets' entry points ([`fuzzing`]) are public,
//! for the targets in `fuzz/`: this is not an API for other crates.

mod client;
mod config;
mod dialog_route;
mod document;
mod errors;
mod events;
mod extension;
pub mod hl7;
mod methods;
mod server;
mod state;
mod web;

#[doc(hidden)]
pub mod fuzzing;

use std::process::ExitCode;

use clap::CommandFactory;
use rpc_core::cli::{self, LogArgs};
use rpc_core::daemon::Threads;

use crate::config::{Cli, Command, Config, ServeArgs};

/// Parses the command line and runs the subcommand (`serve` without one).
pub fn main() -> ExitCode {
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    match cli.command {
        None => serve(cli.serve, &cli.log),
        Some(Command::Serve(args)) => serve(args, &cli.log),
        Some(Command::Ctl(args)) => cli::run_client(client::ctl::run(args)),
        Some(Command::Mcp(args)) => cli::run_client(client::mcp::run(args)),
        Some(Command::Common(common)) => common.run(Cli::command(), config::EXIT_STATUS),
    }
}

/// Runs the daemon: 0 after a clean stop, 1 after a runtime failure or a
/// forced stop, 2 for bad configuration.
fn serve(args: ServeArgs, log: &LogArgs) -> ExitCode {
    let settings = log.init().and_then(|()| Config::from_args(args));
    // One thread: an extension's request, its handler and its reply then run
    // on the thread that read it, with no wake-up of another (editor/getMessage
    // from one extension: 447k/s on two workers, 462k/s on one). Saving files
    // goes to the blocking pool, and large work on the message to a thread of
    // its own (document/edits.rs), so no request holds up the others.
    cli::run_daemon("hermes-host", Threads::One, settings, server::run)
}
