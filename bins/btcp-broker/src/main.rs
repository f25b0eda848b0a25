//! btcp-broker: the BTCP session broker. AI agents call tools that browser pages
//! (or extensions) provide; both dial into the broker over WebSocket or SSE+POST.
//!
//! This file only wires the command line to the server or a client command.

mod broker;
mod client;
mod config;
mod http;
mod mcp;
mod methods;
mod metrics;
mod rate_limit;
mod server;
mod session;
mod toolset;

use std::process::ExitCode;

/// A message's life is a burst of small allocations (frame, params, reply);
/// mimalloc's per-thread free lists make them several times cheaper than
/// glibc's (forwarded tools/call: +60% throughput in rpc-bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::CommandFactory;
use rpc_core::cli;
use rpc_core::daemon::{self, Threads};

use config::{Cli, Command, Config, EndpointArgs, ServeArgs};

fn main() -> ExitCode {
    let cli = match cli::parse::<Cli>() {
        Ok(cli) => cli,
        Err(failure) => return failure.report(),
    };
    if let Some(Command::Common(common)) = &cli.command {
        return common.run(Cli::command());
    }
    if let Err(e) = cli.log.init() {
        return cli::bad_configuration(&e);
    }
    let runtime = match Threads::per_core().runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            rpc_core::log_sink::report(format_args!("btcp-broker: starting the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let endpoint = cli.endpoint;
    match cli.command {
        None => serve(&runtime, &endpoint, &cli.serve),
        Some(Command::Serve(serve_args)) => serve(&runtime, &endpoint, &serve_args),
        Some(command) => match runtime.block_on(client::run(&endpoint, command)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                rpc_core::log_sink::report(format_args!("btcp-broker: {e:#}"));
                ExitCode::FAILURE
            }
        },
    }
}

/// Runs the broker: 0 after a clean stop, 1 after a runtime failure or a
/// forced stop, 2 for bad configuration.
fn serve(runtime: &tokio::runtime::Runtime, endpoint: &EndpointArgs, args: &ServeArgs) -> ExitCode {
    let config = match Config::from_args(endpoint, args) {
        Ok(config) => config,
        Err(e) => return cli::bad_configuration(&e),
    };
    daemon::exit_code_of("btcp-broker", runtime, server::run(config))
}
