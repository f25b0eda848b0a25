//! supex-bridge: a Supex-style JSON-RPC bridge and REPL in front of a live Ruby
//! runtime, and the client commands that talk to it.
//!
//! The tree, bottom to top: the domain ([`runtime`]: the Ruby process and
//! its turns; [`paths`]: where file tools may go), [`errors`] (the daemon's
//! error codes), [`json_size`] (what text takes in a reply), [`state`] (what connections share and keep), [`methods`]
//! (both servers' method tables and the bridge's tools), [`server`] (the
//! wiring), [`config`] (the command line and settings) and [`client`] (the
//! client commands). The binary (`main.rs`) and the fuzz targets in `fuzz/`
//! use this one tree; the fuzz targets reach it through `fuzzing`. Nothing
//! else is public: this is not an API for other crates.

mod client;
mod config;
mod errors;
mod json_size;
mod methods;
mod paths;
mod runtime;
mod server;
mod state;

#[doc(hidden)]
pub mod fuzzing;

use std::process::ExitCode;

use clap::CommandFactory;
use rpc_core::cli::{self, LogArgs};
use rpc_core::daemon::Threads;

use crate::config::{Cli, Command, Config, ServeArgs};

/// Parses the command line and runs the subcommand: the daemon (`serve`, the
/// default) or a client command.
pub fn main() -> ExitCode {
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    match cli.command {
        None => serve(cli.serve, &cli.log),
        Some(Command::Serve(args)) => serve(args, &cli.log),
        Some(Command::Call(args)) => client::call::run(args),
        Some(Command::Repl(args)) => client::repl::run(args),
        Some(Command::Ping(args)) => client::ping::run(args),
        Some(Command::Mcp(args)) => client::mcp::run(args),
        Some(Command::Common(common)) => common.run(Cli::command(), config::EXIT_STATUS),
    }
}

/// Runs the daemon: 0 after a clean stop, 1 after a runtime failure or a
/// forced stop, 2 for bad configuration.
fn serve(args: ServeArgs, log: &LogArgs) -> ExitCode {
    let settings = log.init().and_then(|()| Config::from_args(args));
    // One thread: evaluations take turns on one Ruby anyway, and a second
    // worker only adds cross-thread wake-ups to every round trip (eval_ruby
    // of `1+1`, p50: 125 us on two workers, 100 us on one; ping throughput the
    // same). File tools run on tokio's blocking pool as before.
    cli::run_daemon("supex-bridge", Threads::One, settings, server::run)
}
