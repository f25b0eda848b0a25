//! The client commands: `call`, `repl`, `ping` and `mcp`. Each is a
//! short-lived process started through `rpc_core::cli::run_client` (a
//! current-thread runtime; an error is one line and exit 1), speaking the
//! same JSON-RPC as any other client. Their flags are in [`crate::config`].

pub mod call;
mod connection;
pub mod mcp;
pub mod ping;
pub mod repl;
