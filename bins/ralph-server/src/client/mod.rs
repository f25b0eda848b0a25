//! The client commands: each connects to a task's control socket (by task
//! name or task directory: `socket.rs`), calls its methods and receives its
//! events. Each returns its exit code, or an error that
//! `rpc_core::cli::run_client` prints as `ralph-server: ERROR`, exit code 1.

pub mod attach;
pub mod control;
pub mod mcp;
mod socket;
pub mod status;
