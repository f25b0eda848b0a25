//! The daemon's errors: the ones `run` stops with before the loop starts
//! ([`RunError`], each with its exit code), and the JSON-RPC errors of a
//! request the loop cannot take.
//!
//! ralph-server has no JSON-RPC error codes of its own: the seed's protocol
//! answers a request it cannot take with -32602 (invalid params), in words
//! that name the setting bounding it, and a failure on our side with -32603
//! (internal).

use std::process::ExitCode;

use rpc_core::RpcError;
use rpc_core::daemon::StartError;

use crate::injected::Refused;

/// Why `run` stopped before the loop started.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration or a task already running: exit 2.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Start(#[from] StartError),
}

impl rpc_core::daemon::Failure for RunError {
    fn exit_code(&self) -> ExitCode {
        match self {
            RunError::Refused(_) => ExitCode::from(2),
            RunError::Start(e) => e.exit_code(),
        }
    }
}

/// An injection not taken: over a limit is the caller's to fix (-32602); a
/// prompt that could not be saved is ours (-32603).
pub fn injection_refused(refused: Refused) -> RpcError {
    match refused {
        e @ Refused::Io { .. } => RpcError::internal(e),
        e => RpcError::invalid_params(e),
    }
}
