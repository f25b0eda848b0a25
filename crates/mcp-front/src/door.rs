//! What a daemon supplies: its tools, how to call one, and its resources.

use std::future::Future;

use rmcp::model::{CallToolResult, Implementation, JsonObject, Tool};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::McpError;
use crate::changes::Changes;

/// Who is calling: the MCP client's `clientInfo` (from `initialize`, or from
/// the request's own metadata in the 2026-07-28 era).
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub client: Option<Implementation>,
}

impl Caller {
    /// The client's name (`claude-code`, `cursor`, ...), or `mcp-client`.
    pub fn name(&self) -> &str {
        self.client.as_ref().map_or("mcp-client", |c| c.name.as_str())
    }

    pub fn version(&self) -> &str {
        self.client.as_ref().map_or("", |c| c.version.as_str())
    }
}

/// How the server introduces itself in `initialize`/`server/discover`.
#[derive(Clone, Debug)]
pub struct ServerName {
    pub name: &'static str,
    pub version: &'static str,
    /// What the agent should know before calling anything.
    pub instructions: String,
}

/// One daemon's side of the front door.
///
/// Tool failures (the daemon's JSON-RPC errors, the daemon being down) are
/// tool results with `isError: true`, so the model sees them and can react;
/// a protocol error (`Err`) is only for a request that is itself wrong.
pub trait Door: Send + Sync + 'static {
    fn server_name(&self) -> ServerName;

    /// The change broadcaster the door feeds (tool list changed, resource updated).
    fn changes(&self) -> &Changes;

    /// Whether the tool list can change while the server runs
    /// (`tools.listChanged` is advertised only then).
    fn tools_change(&self) -> bool {
        false
    }

    fn list_tools(&self, caller: &Caller) -> impl Future<Output = Result<Vec<Tool>, McpError>> + Send;

    /// Calls one tool. `cancel` fires when the client cancels the request
    /// (`notifications/cancelled`, its timeout) or goes away: the door stops
    /// waiting for the daemon then.
    fn call_tool(
        &self,
        caller: &Caller,
        name: &str,
        arguments: JsonObject,
        cancel: CancellationToken,
    ) -> impl Future<Output = CallToolResult> + Send;

    /// The resources, as MCP `Resource` objects (`uri`, `name`, `mimeType`, ...).
    fn resources(&self) -> Vec<Value> {
        Vec::new()
    }

    /// The contents of one resource, as MCP `ResourceContents` objects.
    fn read_resource(&self, caller: &Caller, uri: &str) -> impl Future<Output = Result<Vec<Value>, McpError>> + Send {
        let _ = caller;
        let uri = uri.to_owned();
        async move { Err(McpError::resource_not_found(format!("no resource {uri}"), None)) }
    }
}
