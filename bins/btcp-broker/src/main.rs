//! btcp-broker: the BTCP session broker. AI agents call tools that browser pages
//! (or extensions) provide; both dial into the broker over WebSocket or SSE+POST.
//!
//! This file only wires the command line to the server or a client command.

mod broker;
mod client;
mod config;
mod http;
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

use clap::Parser;

use config::{Cli, Command, Config};

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log.init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("btcp-broker: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let endpoint = cli.endpoint;
    let result = match cli.command {
        None => {
            let config = Config::from_args(&endpoint, &cli.serve);
            runtime.block_on(server::run(config))
        }
        Some(Command::Serve(serve)) => {
            let config = Config::from_args(&endpoint, &serve);
            runtime.block_on(server::run(config))
        }
        Some(command) => runtime.block_on(client::run(&endpoint, command)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("btcp-broker: {e:#}");
            ExitCode::FAILURE
        }
    }
}
