//! The MCP front door of one session: its browser's tools as Model Context
//! Protocol tools, for coding agents. Shared by both ways it is served:
//! `btcp-broker mcp --session ID` on stdio (`client/mcp.rs`) and
//! `/mcp?sessionId=ID` over streamable HTTP on the broker's own port
//! (`http/mcp.rs`). It knows neither: only how to reach the broker ([`Dial`]).
//!
//! Either way the MCP side is an ordinary BTCP *agent* of that session: it
//! connects to `/ws` with the broker's token, so the broker's admission,
//! limits and rate limit apply to it as to any agent. Over HTTP the agent's
//! connection is made in process (an in-memory stream served by the same
//! HTTP stack as a socket), not through the network.
//!
//! - The tools are the session browser's; with no browser, there are none.
//! - `notifications/tools/list_changed` whenever the browser registers,
//!   replaces or loses its tools, or the agent connection is made again.
//! - An MCP cancellation (or the client's timeout) cancels the forwarded
//!   call at the broker (`notifications/cancelled`), which tells the browser.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_front::CancellationToken;
use mcp_front::{
    CallToolResult, Caller, Change, Changes, Door, Failure, JsonObject, Link, McpError, ServerName, Tool, Upstream,
};
use rpc_core::codec::websocket;
use rpc_core::{CancelNotice, PeerHandle, Router};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::errors;

/// How the agent connection reaches the broker at `authority` (`host:port`,
/// also where a person opens the session's page).
pub enum Dial {
    /// Over TCP, from another process (`btcp-broker mcp`).
    Tcp { authority: String },
    /// Inside the broker (`/mcp`): an in-memory stream served by the broker's
    /// own HTTP stack, so admission and auth are the same as over a socket.
    InProcess { authority: String, serve: ServeInProcess },
}

/// Serves one in-memory connection as the broker serves a socket's (it
/// spawns the serving, and returns at once).
pub type ServeInProcess = Arc<dyn Fn(tokio::io::DuplexStream) + Send + Sync>;

impl Dial {
    fn authority(&self) -> &str {
        match self {
            Dial::Tcp { authority } | Dial::InProcess { authority, .. } => authority,
        }
    }
}

/// What the agent connection has heard about its session.
struct SessionView {
    session: String,
    browser: AtomicBool,
    connected_before: AtomicBool,
    changes: Changes,
}

impl SessionView {
    fn browser(&self, present: bool) {
        self.browser.store(present, Ordering::Release);
        self.changes.send(Change::Tools);
    }
}

/// The broker as seen by one session's agent.
pub struct SessionAgent {
    dial: Dial,
    token: Option<String>,
    view: Arc<SessionView>,
}

impl SessionAgent {
    fn url(&self, authority: &str) -> String {
        let session: String = form_urlencoded::byte_serialize(self.view.session.as_bytes()).collect();
        format!("ws://{authority}/ws?clientType=agent&sessionId={session}&version=mcp")
    }

    /// The notifications the broker sends its agents that matter here.
    fn router() -> Arc<Router<Arc<SessionView>>> {
        Router::new()
            .method("session/browserConnected", |cx: rpc_core::Ctx<Arc<SessionView>>, _: Value| async move {
                cx.state.browser(true);
                Ok(())
            })
            .method("session/browserDisconnected", |cx: rpc_core::Ctx<Arc<SessionView>>, _: Value| async move {
                cx.state.browser(false);
                Ok(())
            })
            .method("notifications/tools/list_changed", |cx: rpc_core::Ctx<Arc<SessionView>>, _: Value| async move {
                cx.state.changes.send(Change::Tools);
                Ok(())
            })
            // Events were dropped while we were slow: re-list to be sure.
            .method("notifications/missed", |cx: rpc_core::Ctx<Arc<SessionView>>, _: Value| async move {
                cx.state.changes.send(Change::Tools);
                Ok(())
            })
            .build()
            .expect("each notification is registered once")
    }

    async fn open(&self) -> Result<PeerHandle, String> {
        let authority = self.dial.authority();
        let url = self.url(authority);
        let mut request = url.as_str().into_client_request().map_err(|e| format!("{url}: {e}"))?;
        if let Some(token) = &self.token {
            let value = format!("Bearer {token}").parse().map_err(|_| "the token is not a valid header value")?;
            request.headers_mut().insert("authorization", value);
        }
        let config = Some(websocket::config(websocket::DEFAULT_MAX_MESSAGE));
        let refused = |e: tokio_tungstenite::tungstenite::Error| match e {
            tokio_tungstenite::tungstenite::Error::Http(response) => {
                let body =
                    response.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                format!("the broker refused the agent connection: HTTP {}: {body}", response.status())
            }
            other => format!("the broker at {authority} is not reachable: {other}. Start it with `btcp-broker serve`."),
        };
        let transport = match &self.dial {
            Dial::Tcp { .. } => {
                let (ws, _) =
                    tokio_tungstenite::connect_async_with_config(request, config, true).await.map_err(refused)?;
                websocket::transport(ws)
            }
            Dial::InProcess { serve, .. } => {
                let (ours, theirs) = tokio::io::duplex(64 * 1024);
                serve(theirs);
                let (ws, _) =
                    tokio_tungstenite::client_async_with_config(request, ours, config).await.map_err(refused)?;
                websocket::transport(ws)
            }
        };
        Ok(rpc_core::client::spawn(transport, Self::router(), self.view.clone()))
    }
}

impl Upstream for SessionAgent {
    async fn connect(&self) -> Result<PeerHandle, String> {
        let peer = self.open().await?;
        let view = &self.view;
        // Joined already by the URL; `session/join` of the same session tells
        // whether its browser is there.
        let joined: Value = peer
            .request_raw("session/join", &json!({"sessionId": view.session}), Some(Duration::from_secs(10)))
            .await
            .map_err(|e| format!("joining session {}: {e}", view.session))
            .and_then(|raw| serde_json::from_str(raw.get()).map_err(|e| e.to_string()))?;
        view.browser.store(joined["hasBrowser"] == true, Ordering::Release);
        if view.connected_before.swap(true, Ordering::AcqRel) {
            view.changes.send(Change::Tools);
        }
        Ok(peer)
    }

    fn cancel_notice(&self) -> Option<CancelNotice> {
        Some(CancelNotice::MCP)
    }
}

/// One session's tools as an MCP server.
pub struct SessionDoor {
    link: Link<SessionAgent>,
    /// Sent as the forwarded call's `timeout` (ms); none: the broker's default.
    call_timeout: Option<Duration>,
    /// Where a person opens the session in a browser (for error messages).
    page: String,
    /// Fires when the broker is about to stop (`/mcp`): calls still running
    /// are answered `shutting_down` while that answer can still be sent.
    ending: Option<CancellationToken>,
}

impl SessionDoor {
    pub fn new(
        dial: Dial,
        session: &str,
        token: Option<String>,
        call_timeout: Option<Duration>,
        ending: Option<CancellationToken>,
    ) -> Arc<Self> {
        let encoded: String = form_urlencoded::byte_serialize(session.as_bytes()).collect();
        let page = format!("http://{}/?sessionId={encoded}", dial.authority());
        let view = Arc::new(SessionView {
            session: session.to_owned(),
            browser: AtomicBool::new(false),
            connected_before: AtomicBool::new(false),
            changes: Changes::new(),
        });
        Arc::new(SessionDoor { link: Link::new(SessionAgent { dial, token, view }), call_timeout, page, ending })
    }

    fn view(&self) -> &SessionView {
        &self.link.upstream().view
    }

    /// Keeps the agent connection up so that tool changes reach MCP clients
    /// between their requests: connects now, and again (with a growing pause)
    /// whenever it drops, until `stop`.
    pub fn keep_connected(self: &Arc<Self>, stop: CancellationToken) {
        let door = self.clone();
        tokio::spawn(async move {
            let door = &door;
            mcp_front::keep_connected(&door.link, &stop, Duration::from_millis(250), |peer| async move {
                peer.closed().await;
                // The browser's tools are out of reach until we are back.
                door.view().browser(false);
            })
            .await;
            // Stopped (the door is closed, or the broker drains): its agent
            // leaves the session now, not when the last reference goes.
            door.link.reset().await;
        });
    }
}

impl Door for SessionDoor {
    fn server_name(&self) -> ServerName {
        let session = &self.view().session;
        ServerName {
            name: "btcp-broker",
            version: env!("CARGO_PKG_VERSION"),
            instructions: format!(
                "The tools of the browser page in BTCP session {session:?}: each call runs in that page. \
                 The list changes when the page registers tools or goes away; with no page open the list is \
                 empty (open {} to start one).",
                self.page
            ),
        }
    }

    fn changes(&self) -> &Changes {
        &self.view().changes
    }

    fn tools_change(&self) -> bool {
        true
    }

    async fn list_tools(&self, _caller: &Caller) -> Result<Vec<Tool>, McpError> {
        let never = CancellationToken::new();
        let listed = match self.link.call("tools/list", &json!({}), Some(Duration::from_secs(10)), &never).await {
            Ok(listed) => listed,
            // The broker is down: no tools now; list_changed follows when it is back.
            Err(Failure::Unreachable(why)) => {
                tracing::warn!("{why}");
                return Ok(Vec::new());
            }
            Err(failure) => return Err(failure.into_error()),
        };
        if !self.view().browser.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        Ok(listed["tools"].as_array().into_iter().flatten().filter_map(mcp_front::tool_from_json).collect())
    }

    async fn call_tool(
        &self,
        _caller: &Caller,
        name: &str,
        arguments: JsonObject,
        cancel: CancellationToken,
    ) -> CallToolResult {
        let mut params = json!({"name": name, "arguments": Value::Object(arguments)});
        if let Some(limit) = self.call_timeout {
            params["timeout"] = json!(limit.as_millis() as u64);
        }
        let answer = match &self.ending {
            None => self.link.call("tools/call", &params, None, &cancel).await,
            Some(ending) => {
                // Cancelled at the broker (which tells the browser) when the
                // broker is about to stop, as when the MCP client cancels.
                let call_cancel = cancel.child_token();
                let call = self.link.call("tools/call", &params, None, &call_cancel);
                tokio::pin!(call);
                tokio::select! {
                    answer = &mut call => answer,
                    () = ending.cancelled() => {
                        call_cancel.cancel();
                        let _ = call.await;
                        Err(Failure::Rpc(errors::shutting_down()))
                    }
                }
            }
        };
        match answer {
            // The browser answers in MCP's own shape; anything else is shown as JSON.
            Ok(result) => mcp_front::passed_on(result),
            Err(Failure::Rpc(e)) if e.code == errors::NO_BROWSER => mcp_front::failure(
                format!(
                    "{}: no browser page has this session open. Open {} to provide its tools.",
                    e.message, self.page
                ),
                None,
            ),
            Err(failure) => failure.into_result(),
        }
    }
}
