//! btcp-broker: the BTCP session broker. AI agents call tools that browser pages
//! (or extensions) provide; both dial into the broker over WebSocket or SSE+POST.
//!
//! The library owns the whole tree, so that the binary (`main.rs`) and the
//! fuzz targets (through [`fuzzing`]) run the same code. Nothing else is
//! public: this is not an API for other crates.

mod client;
mod cluster;
mod config;
mod errors;
mod http;
mod mcp_door;
mod methods;
mod metrics;
mod peer;
mod rate_limit;
mod server;
mod sessions;
mod state;
mod toolset;

#[doc(hidden)]
pub mod fuzzing;

use std::process::ExitCode;

use clap::CommandFactory;
use rpc_core::cli;
use rpc_core::daemon::Threads;

use config::{Cli, Command, Config, EndpointArgs, ServeArgs};

/// Parses the command line and runs the broker (the default) or a client
/// command.
pub fn main() -> ExitCode {
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    if let Some(Command::Common(common)) = &cli.command {
        return common.run(Cli::command(), config::EXIT_STATUS);
    }
    if let Err(e) = cli.log.init() {
        return cli::bad_configuration(&e);
    }
    let endpoint = cli.endpoint;
    match cli.command {
        None => serve(&endpoint, &cli.serve),
        Some(Command::Serve(serve_args)) => serve(&endpoint, &serve_args),
        // `{:#}`: the whole chain of causes, on the one line run_client prints.
        Some(command) => cli::run_client(async { client::run(&endpoint, command).await.map_err(|e| format!("{e:#}")) }),
    }
}

/// Runs the broker: 0 after a clean stop, 1 after a runtime failure or a
/// forced stop, 2 for bad configuration.
fn serve(endpoint: &EndpointArgs, args: &ServeArgs) -> ExitCode {
    cli::run_daemon("btcp-broker", Threads::per_core(), Config::from_args(endpoint, args), server::run)
}
