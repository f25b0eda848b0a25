//! hermes-host: a headless host for Hermes extensions (HL7 v2 message editing).
//!
//! Not built yet: the daemon has its own issue. Until it lands this binary only
//! describes itself, so that the workspace layout, `--help` and packaging are in
//! place, and it refuses to pretend to serve.

use clap::{Parser, Subcommand};

/// Headless host for Hermes extensions: runs extension processes over stdio
/// (Content-Length framed JSON-RPC), holds the HL7 v2 message they edit, and
/// serves a control socket. Specification: shared/specs/hermes-host.md.
///
/// Status: not implemented in this build.
#[derive(Parser)]
#[command(name = "hermes-host", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the host (not implemented in this build).
    Serve,
}

fn main() {
    let _ = Cli::parse();
    eprintln!("hermes-host: not implemented in this build (see shared/specs/hermes-host.md)");
    std::process::exit(1);
}
