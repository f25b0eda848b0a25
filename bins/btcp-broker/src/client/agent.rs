//! Connecting to a broker as an agent over WebSocket.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use rpc_core::codec::websocket;
use rpc_core::{CallError, PeerHandle, Router};
use serde::Serialize;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::config::EndpointArgs;
use rpc_core::escape::OneLine;

/// `host:port` to connect to; a wildcard listen address means this machine.
pub fn authority(endpoint: &EndpointArgs) -> String {
    rpc_core::config::connect_address(&endpoint.host, endpoint.port)
}

/// Nothing listening is the common case (the broker is not started): say
/// how to start it.
pub fn unreachable(authority: &str, error: &std::io::Error) -> anyhow::Error {
    if error.kind() == std::io::ErrorKind::ConnectionRefused {
        anyhow!(
            "no btcp-broker is listening at {authority}: start it with `btcp-broker serve` \
             (or set BTCP_HOST/BTCP_PORT to where it listens)"
        )
    } else {
        anyhow!("connecting to the broker at {authority}: {error}")
    }
}

/// An agent joined to one session.
pub struct Agent {
    peer: PeerHandle,
    /// The `session/join` result: `{sessionId, hasBrowser, tools}`.
    pub joined: Value,
}

impl Agent {
    pub async fn join(endpoint: &EndpointArgs, session: &str) -> anyhow::Result<Agent> {
        let url = format!("ws://{}/ws?clientType=agent", authority(endpoint));
        let mut request = url.as_str().into_client_request()?;
        if let Some(token) = &endpoint.auth_token {
            request.headers_mut().insert("authorization", format!("Bearer {token}").parse()?);
        }
        let config = websocket::config(websocket::DEFAULT_MAX_MESSAGE);
        let (ws, _) =
            tokio_tungstenite::connect_async_with_config(request, Some(config), true).await.map_err(|e| match e {
                tokio_tungstenite::tungstenite::Error::Http(response) => {
                    let body =
                        response.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                    anyhow!("the broker refused the connection: HTTP {}: {body}", response.status())
                }
                tokio_tungstenite::tungstenite::Error::Io(e) => unreachable(&authority(endpoint), &e),
                other => anyhow!("connecting to {url}: {other}"),
            })?;
        let peer = rpc_core::client::spawn(websocket::transport(ws), Router::<()>::empty(), ());
        let mut agent = Agent { peer, joined: Value::Null };
        agent.joined = agent
            .request("session/join", &serde_json::json!({ "sessionId": session }), Duration::from_secs(10))
            .await?;
        Ok(agent)
    }

    pub async fn request(&self, method: &str, params: &impl Serialize, timeout: Duration) -> anyhow::Result<Value> {
        match self.peer.request_raw(method, params, Some(timeout)).await {
            Ok(raw) => serde_json::from_str(raw.get()).context("the broker's answer"),
            // The message may be the browser's own (a tool's error).
            Err(CallError::Rpc(e)) => bail!("{method}: {} ({})", OneLine(&e.message), e.code),
            Err(e) => bail!("{method}: {e}"),
        }
    }

    pub fn close(&self) {
        self.peer.close(1000, "");
    }
}
