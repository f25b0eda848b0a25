//! supex-bridge: a Supex-style JSON-RPC bridge and REPL in front of a live Ruby
//! runtime, and the client commands that talk to it.
//!
//! This file only wires the command line to the configuration and the code
//! that runs it.

mod auth;
mod bridge;
mod client;
mod config;
mod errors;
mod paths;
mod repl;
mod runtime;
mod server;
mod tools;

use std::process::ExitCode;

/// A message's life is a burst of small allocations (frame, params, reply);
/// mimalloc's per-thread free lists make them several times cheaper than
/// glibc's (forwarded tools/call: +60% throughput in rpc-bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use rpc_core::cli::LogArgs;

use crate::config::{Config, ServeArgs};

/// A Supex-style bridge (JSON-RPC over TCP) and REPL in front of a live Ruby runtime.
///
/// Without a subcommand it runs the daemon (`serve`).
#[derive(Debug, Parser)]
#[command(name = "supex-bridge", version, args_conflicts_with_subcommands = true)]
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
    /// Run the bridge and REPL servers with their Ruby runtime (the default).
    Serve(ServeArgs),
    /// Call one bridge tool and print its result as JSON.
    Call(client::call::CallArgs),
    /// An interactive Ruby console on the REPL server.
    Repl(client::repl::ReplArgs),
    /// Check that the bridge answers (exit 0) or not (exit 1), for health checks.
    Ping(client::ping::PingArgs),
}

fn main() -> ExitCode {
    let cli = parse();
    match cli.command {
        None => serve(cli.serve, &cli.log),
        Some(Command::Serve(args)) => serve(args, &cli.log),
        Some(Command::Call(args)) => client::call::run(args),
        Some(Command::Repl(args)) => client::repl::run(args),
        Some(Command::Ping(args)) => client::ping::run(args),
    }
}

fn serve(args: ServeArgs, log: &LogArgs) -> ExitCode {
    log.init();
    let config = Config::from_args(args);
    // One thread: evaluations take turns on one Ruby anyway, and a second
    // worker only adds cross-thread wake-ups to every round trip (eval_ruby
    // of `1+1`, p50: 125 us on two workers, 100 us on one; ping throughput the
    // same). File tools run on tokio's blocking pool as before.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("supex-bridge: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(server::run(config))
}

/// Parses the command line. A bad value is reported in one line naming the
/// setting and its env variable, exit code 2, like every other bad setting.
fn parse() -> Cli {
    let command = Cli::command();
    let matches = command.clone().try_get_matches();
    let result = matches.and_then(|m| Cli::from_arg_matches(&m));
    match result {
        Ok(cli) => cli,
        Err(e) => bad_arguments(e, &command),
    }
}

fn bad_arguments(error: clap::Error, command: &clap::Command) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(error.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        error.exit();
    }
    let arg = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.clone(),
        _ => error.exit(),
    };
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => value.clone(),
        _ => String::new(),
    };
    // `--port <PORT>` -> the argument's env variable, if it has one.
    let long = arg.split_whitespace().next().unwrap_or(&arg).trim_start_matches('-');
    let env = std::iter::once(command)
        .chain(command.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned());
    let setting = match env {
        Some(env) => format!("{env} (--{long})"),
        None => format!("--{long}"),
    };
    let rendered = error.render().to_string();
    let why = rendered
        .lines()
        .next()
        .and_then(|l| l.rsplit_once(": "))
        .map(|(_, why)| why.to_owned())
        .unwrap_or_else(|| "invalid value".into());
    rpc_core::cli::config_error(&setting, format!("invalid value {value:?}: {why}"))
}
