//! ralph-server: runs a Ralph coding-agent loop in a PTY with a Unix-socket
//! control plane.
//!
//! Not built yet: the daemon has its own issue. Until it lands this binary only
//! describes itself, so that the workspace layout, `--help` and packaging are in
//! place, and it refuses to pretend to run a loop.

use clap::{Parser, Subcommand};

/// Runs a Ralph agent loop over a task's PRD in a pseudo-terminal and serves its
/// JSON-RPC control protocol on a Unix socket. Specification:
/// shared/specs/ralph-server.md.
///
/// Status: not implemented in this build.
#[derive(Parser)]
#[command(name = "ralph-server", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the loop for one task directory (not implemented in this build).
    Run { task_dir: std::path::PathBuf },
}

fn main() {
    let _ = Cli::parse();
    eprintln!("ralph-server: not implemented in this build (see shared/specs/ralph-server.md)");
    std::process::exit(1);
}
