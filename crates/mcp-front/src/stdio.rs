//! Serving one MCP session on standard input and output, the way MCP
//! clients launch a server.

use std::sync::Arc;

use rmcp::ServiceExt;

use crate::door::Door;
use crate::front::Front;

/// Serves until the client closes stdin (or the session fails). Logs go to
/// stderr: stdout belongs to the protocol.
pub async fn serve_stdio<D: Door>(door: Arc<D>) -> Result<(), String> {
    let service = Front::new(door)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP session did not start: {e}"))?;
    service.waiting().await.map_err(|e| format!("the MCP session failed: {e}"))?;
    Ok(())
}
