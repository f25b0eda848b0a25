//! The client subcommands, each a client of a running host's control
//! socket: `hermes-host ctl ...` ([`ctl`]), one command per control method;
//! `ctl ui` ([`terminal_ui`]), a terminal that answers the extensions'
//! dialogs; `hermes-host mcp` ([`mcp`]), the same methods as an MCP server
//! for agents.

pub mod ctl;
pub mod mcp;
mod terminal_ui;
