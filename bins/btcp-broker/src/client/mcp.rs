//! `btcp-broker mcp --session ID`: one session's browser tools as an MCP
//! server on stdio, through the running broker (as an agent of that session,
//! over TCP). The door itself is `mcp_door.rs`, shared with `/mcp`.

use std::time::Duration;

use mcp_front::CancellationToken;

use super::agent::authority;
use crate::config::EndpointArgs;
use crate::mcp_door::{Dial, SessionDoor};

/// Serves MCP on stdio until the client closes it.
pub async fn serve_stdio(endpoint: &EndpointArgs, session: &str, call_timeout: Option<Duration>) -> anyhow::Result<()> {
    let dial = Dial::Tcp { authority: authority(endpoint) };
    let door = SessionDoor::new(dial, session, endpoint.auth_token.clone(), call_timeout, None);
    let stop = CancellationToken::new();
    door.keep_connected(stop.clone());
    let served = mcp_front::serve_stdio(door).await;
    stop.cancel();
    served.map_err(|e| anyhow::anyhow!(e))
}
