//! The MCP sessions of `/mcp` (one per `initialize`): rmcp's own in-memory
//! sessions, at most `BTCP_MAX_MCP_SESSIONS` of them alive at once over
//! every door. rmcp keeps a session (~80 KiB) until its client ends it or it
//! idles out, and sets no limit: an `initialize` flood grew the broker by
//! 5 GB in 30 s.
//!
//! A request that may open a session takes a slot first ([`SessionSlots`]),
//! so a full broker refuses it (503, in `mcp.rs`) before rmcp sees it; the
//! slot travels with the request into [`CappedSessions::create_session`]
//! and is held by the session until rmcp closes it (its client's DELETE,
//! idle expiry, the broker stopping).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use mcp_front::rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use mcp_front::rmcp::transport::streamable_http_server::SessionManager;
use mcp_front::rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};
use mcp_front::rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Room for the live MCP sessions of every door.
#[derive(Clone)]
pub struct SessionSlots {
    free: Arc<Semaphore>,
    max: usize,
}

/// One session's place among the live ones, given back when dropped.
pub struct SessionSlot {
    _free_when_dropped: OwnedSemaphorePermit,
}

tokio::task_local! {
    /// The slot the request being served took for the session it may open.
    static TAKEN: RefCell<Option<SessionSlot>>;
}

impl SessionSlots {
    pub fn new(max: usize) -> Self {
        SessionSlots { free: Arc::new(Semaphore::new(max)), max }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot, or `None` when `max` sessions are alive.
    pub fn take(&self) -> Option<SessionSlot> {
        let permit = self.free.clone().try_acquire_owned().ok()?;
        Some(SessionSlot { _free_when_dropped: permit })
    }

    /// Runs `serve` (one request) with `slot` for the session it may open;
    /// unused, the slot is given back when `serve` ends.
    pub async fn serving<F: Future>(slot: SessionSlot, serve: F) -> F::Output {
        TAKEN.scope(RefCell::new(Some(slot)), serve).await
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error("too many MCP sessions (at most {0}, BTCP_MAX_MCP_SESSIONS)")]
    Full(usize),
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// One door's sessions: rmcp's [`LocalSessionManager`], each session
/// holding a slot of the shared [`SessionSlots`].
pub struct CappedSessions {
    inner: LocalSessionManager,
    slots: SessionSlots,
    held: Mutex<HashMap<SessionId, SessionSlot>>,
}

impl CappedSessions {
    /// `keep_alive`: a session with no message either way for this long is
    /// closed (rmcp's idle expiry).
    pub fn new(slots: SessionSlots, keep_alive: Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        let mut config = SessionConfig::default();
        config.keep_alive = Some(keep_alive);
        inner.session_config = config;
        CappedSessions { inner, slots, held: Mutex::default() }
    }
}

impl CappedSessions {
    /// Ends each session's GET event stream (the session stays): the
    /// broker drains, and an open stream would hold its connection until
    /// the grace period is over.
    pub async fn close_standalone_streams(&self) {
        let sessions: Vec<_> = self.inner.sessions.read().await.values().cloned().collect();
        for session in sessions {
            let _ = session.close_standalone_sse_stream(None).await;
        }
    }
}

impl SessionManager for CappedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // The request's own slot; a request `mcp.rs` did not expect to open
        // a session takes one here, or is refused.
        let taken = TAKEN.try_with(|taken| taken.borrow_mut().take()).ok().flatten();
        let slot = taken.or_else(|| self.slots.take()).ok_or(SessionsError::Full(self.slots.max))?;
        let (id, transport) = self.inner.create_session().await?;
        self.held.lock().insert(id.clone(), slot);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    /// Called by rmcp for every session that ends, however it ends.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.inner.close_session(id).await;
        self.held.lock().remove(id);
        Ok(closed?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::create_stream(&self.inner, id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::create_standalone_stream(&self.inner, id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::resume(&self.inner, id, last_event_id).await?)
    }
}
