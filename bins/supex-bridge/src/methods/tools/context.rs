//! What every tool runs with ([`ToolContext`]), how each is described in
//! `tools/list` ([`ToolSpec`]), and the way file-system work leaves the async
//! threads ([`blocking`]). The tool table that uses them is the folder's
//! `mod.rs`.

use std::path::PathBuf;
use std::sync::Arc;

use rpc_core::{PeerHandle, RpcError};
use serde_json::Value;

use crate::state::{App, BridgeConn};

/// What a tool runs with: the shared state, the calling connection (its
/// handle and its state) and its workspace.
pub struct ToolContext {
    pub app: Arc<App>,
    pub peer: PeerHandle,
    pub conn: Arc<BridgeConn>,
    pub workspace: Option<PathBuf>,
}

/// A tool's entry in `tools/list`.
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: fn() -> Value,
}

/// Runs blocking file-system work off the async threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| RpcError::internal(format!("file operation failed: {e}")))?
}
