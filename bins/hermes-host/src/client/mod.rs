//! The client subcommands, each a client of a running host's control
//! socket: `hermes-host ctl ...` ([`ctl`]), one command per control method;
//! `ctl ui` ([`terminal_ui`]), a terminal that answers the extensions'
//! dialogs; `hermes-host mcp` ([`mcp`]), the same methods as an MCP server
//! for agents.

pub mod ctl;
pub mod mcp;
mod terminal_ui;

/// Why a client could not connect to the host's control socket at `socket`:
/// for a host that is not running, where it looked and how to start one.
fn not_reached(socket: &std::path::Path, error: std::io::Error) -> String {
    use std::io::ErrorKind::{ConnectionRefused, NotFound};
    match error.kind() {
        NotFound | ConnectionRefused => format!(
            "hermes-host is not running: no host listens at {} ({error}). Start it with `hermes-host` \
             (or `systemctl --user start hermes-host`), or give its socket with --socket or HERMES_HOST_SOCKET",
            socket.display()
        ),
        _ => format!("cannot reach hermes-host at {}: {error}", socket.display()),
    }
}
