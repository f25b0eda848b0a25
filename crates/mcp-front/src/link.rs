//! The connection to the daemon: made on first use, made again after the
//! daemon restarts, never retried behind the agent's back.
//!
//! A call that was sent when the connection broke is *not* repeated: the
//! daemon may have run it (an evaluation, a write). The agent gets a tool
//! error saying so, and its next call connects afresh.

use std::future::Future;
use std::time::Duration;

use rpc_core::{CallError, CancelNotice, PeerHandle, RpcError};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::CallToolResult;
use crate::content::failure;

/// How to reach one daemon over its own protocol, handshake included.
pub trait Upstream: Send + Sync + 'static {
    /// Connects and completes the daemon's handshake (e.g. `hello` with the
    /// token). The error is a sentence for the agent: what could not be
    /// reached and how to start it.
    fn connect(&self) -> impl Future<Output = Result<PeerHandle, String>> + Send;

    /// How to tell the daemon that the agent abandoned a call, if its
    /// protocol has a way (BTCP: `notifications/cancelled`). Without one the
    /// call is only forgotten here, and the daemon's late answer dropped.
    fn cancel_notice(&self) -> Option<CancelNotice> {
        None
    }
}

/// Why a call produced no result.
#[derive(Debug)]
pub enum Failure {
    /// The daemon could not be reached (or refused the handshake).
    Unreachable(String),
    /// The daemon answered with a JSON-RPC error.
    Rpc(RpcError),
    /// The connection broke while the call was out; it may or may not have run.
    Lost,
    Timeout(Duration),
    /// The MCP client cancelled the request or went away.
    Cancelled,
    Malformed(String),
}

impl Failure {
    /// What went wrong, in words, and the daemon's error data if any.
    fn describe(self) -> (String, Option<Value>) {
        match self {
            Failure::Unreachable(why) => (why, None),
            Failure::Rpc(e) => (e.message, e.data),
            Failure::Lost => (
                "the connection to the daemon broke while the call was running; it may or may not have \
                 completed. The next call reconnects."
                    .into(),
                None,
            ),
            Failure::Timeout(limit) => (format!("no answer from the daemon within {limit:?}"), None),
            Failure::Cancelled => ("cancelled".into(), None),
            Failure::Malformed(why) => (format!("the daemon's answer was malformed: {why}"), None),
        }
    }

    /// The failure as a tool result the model can read.
    pub fn into_result(self) -> CallToolResult {
        let (message, data) = self.describe();
        failure(message, data.as_ref())
    }

    /// The failure as a protocol error, for requests that are not tool calls
    /// (`tools/list`, `resources/read`).
    pub fn into_error(self) -> crate::McpError {
        let (message, data) = self.describe();
        crate::McpError::internal_error(message, data)
    }
}

/// The live connection to one daemon, shared by every MCP request.
pub struct Link<U> {
    upstream: U,
    current: Mutex<Option<PeerHandle>>,
}

impl<U: Upstream> Link<U> {
    pub fn new(upstream: U) -> Self {
        Self { upstream, current: Mutex::new(None) }
    }

    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    /// The connection, made now if there is none or the last one closed.
    pub async fn peer(&self) -> Result<PeerHandle, Failure> {
        let mut current = self.current.lock().await;
        if let Some(peer) = current.as_ref().filter(|p| !p.close_token().is_cancelled()) {
            return Ok(peer.clone());
        }
        *current = None;
        let peer = self.upstream.connect().await.map_err(Failure::Unreachable)?;
        *current = Some(peer.clone());
        Ok(peer)
    }

    /// Drops the connection so the next call makes a new one (after the
    /// daemon said something that invalidates it, e.g. a changed token).
    pub async fn reset(&self) {
        if let Some(peer) = self.current.lock().await.take() {
            peer.close(1000, "reconnecting");
        }
    }

    /// One request, abandoned when `cancel` fires. `timeout: None` waits as
    /// long as the connection lives.
    pub async fn call(
        &self,
        method: &str,
        params: &Value,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Value, Failure> {
        let peer = tokio::select! {
            peer = self.peer() => peer?,
            _ = cancel.cancelled() => return Err(Failure::Cancelled),
        };
        let reply = peer.request_cancellable(method, params, timeout, cancel, self.upstream.cancel_notice()).await;
        match reply {
            Ok(raw) => serde_json::from_str(raw.get()).map_err(|e| Failure::Malformed(e.to_string())),
            Err(CallError::Rpc(e)) => Err(Failure::Rpc(e)),
            Err(CallError::Timeout(limit)) => Err(Failure::Timeout(limit)),
            Err(CallError::Malformed(why)) => Err(Failure::Malformed(why)),
            Err(CallError::Disconnected) => Err(Failure::Lost),
            Err(CallError::Cancelled) => Err(Failure::Cancelled),
        }
    }
}

/// Keeps `link` connected in the background, so that the daemon's events
/// reach the agent between its calls: connects (while the daemon is down,
/// again after a pause that grows from `retry` to 5 s), runs
/// `connected(peer)` (normally until the connection closes), and starts
/// over, until `stop` fires.
pub async fn keep_connected<U, F, Fut>(link: &Link<U>, stop: &CancellationToken, retry: Duration, mut connected: F)
where
    U: Upstream,
    F: FnMut(PeerHandle) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut pause = retry;
    loop {
        let peer = tokio::select! {
            _ = stop.cancelled() => return,
            peer = link.peer() => peer,
        };
        match peer {
            Ok(peer) => {
                pause = retry;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    () = connected(peer) => {}
                }
            }
            Err(why) => tracing::debug!("the daemon is not reachable: {why:?}"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(5).max(retry));
    }
}
