//! Every session of the broker, by id: browsers and agents attach here, the
//! HTTP endpoints list and count from here, and idle sessions and departed
//! browsers' tool lists are dropped from here.
//!
//! Locking: the map is locked only to find, create or remove a session, never
//! on the tools/call path (an agent holds its `Arc<Session>`). Lock order is
//! map, then session.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::Shutdown;

use super::session::{BrowserSlot, CachedTools, Session, SessionInfo, ToolsUpdated};
use rpc_core::escape::OneLine;

/// What a browser arriving at a session found there.
pub struct Attached {
    pub session: Arc<Session>,
    /// The browser it replaced, to be told and closed.
    pub replaced: Option<BrowserSlot>,
}

/// Why a connection could not be attached to a session.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("the broker holds its maximum of {0} sessions")]
    TooManySessions(usize),
    #[error("session {session} already has its maximum of {max} agents")]
    TooManyAgents { session: Arc<str>, max: usize },
    #[error("session {0} not found")]
    NotFound(String),
}

/// Counts for `/health` and `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub sessions: usize,
    pub browsers: usize,
    pub agents: usize,
    /// Bytes of tool lists held for browsers that have left.
    pub cached_tool_bytes: usize,
}

pub struct SessionRegistry {
    sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    max_sessions: usize,
    max_agents: usize,
    cache: Arc<CachedTools>,
}

impl SessionRegistry {
    pub fn new(max_sessions: usize, max_agents: usize, tools_budget: usize) -> SessionRegistry {
        SessionRegistry {
            sessions: Mutex::new(HashMap::new()),
            max_sessions,
            max_agents,
            cache: Arc::new(CachedTools::new(tools_budget)),
        }
    }

    /// Puts a browser in its session, creating the session if it is new, and
    /// unseats the browser that was there.
    pub fn attach_browser(&self, id: &str, slot: BrowserSlot) -> Result<Attached, AttachError> {
        let mut sessions = self.sessions.lock();
        let session = self.get_or_create(&mut sessions, id)?;
        let replaced = session.seat_browser(slot);
        drop(sessions);
        session.touch();
        Ok(Attached { session, replaced })
    }

    /// Adds an agent to a session. `create`: an agent that named the session in
    /// its URL waits for a browser that has not arrived yet; `session/join`
    /// only joins sessions that exist.
    pub fn attach_agent(&self, id: &str, create: bool) -> Result<Arc<Session>, AttachError> {
        let mut sessions = self.sessions.lock();
        let session = match sessions.get(id) {
            Some(session) => session.clone(),
            None if create => self.get_or_create(&mut sessions, id)?,
            None => return Err(AttachError::NotFound(id.to_owned())),
        };
        if !session.add_agent(self.max_agents) {
            return Err(AttachError::TooManyAgents { session: session.id.clone(), max: self.max_agents });
        }
        drop(sessions);
        session.touch();
        Ok(session)
    }

    fn get_or_create(
        &self,
        sessions: &mut HashMap<Arc<str>, Arc<Session>>,
        id: &str,
    ) -> Result<Arc<Session>, AttachError> {
        if let Some(session) = sessions.get(id) {
            return Ok(session.clone());
        }
        if sessions.len() >= self.max_sessions {
            return Err(AttachError::TooManySessions(self.max_sessions));
        }
        let id: Arc<str> = id.into();
        let session = Arc::new(Session::new(id.clone(), self.cache.clone()));
        sessions.insert(id, session.clone());
        tracing::info!(session = %OneLine(&session.id), "session created");
        Ok(session)
    }

    /// Whether a new session could be created now (checked before an upgrade,
    /// so that a full broker answers HTTP 503 rather than accept and close).
    pub fn can_hold(&self, id: Option<&str>) -> bool {
        let sessions = self.sessions.lock();
        id.is_some_and(|id| sessions.contains_key(id)) || sessions.len() < self.max_sessions
    }

    /// Whether one more agent fits in session `id` (a new session has room).
    pub fn has_agent_room(&self, id: &str) -> bool {
        let sessions = self.sessions.lock();
        sessions.get(id).is_none_or(|s| s.attendance().1 < self.max_agents)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().get(id).cloned()
    }

    /// Ids of the sessions that have a browser (what an agent can use).
    pub fn with_browser(&self) -> Vec<Arc<str>> {
        let sessions: Vec<Arc<Session>> = self.sessions.lock().values().cloned().collect();
        let mut ids: Vec<Arc<str>> = sessions.into_iter().filter(|s| s.has_browser()).map(|s| s.id.clone()).collect();
        ids.sort_unstable();
        ids
    }

    pub fn list(&self) -> Vec<SessionInfo> {
        let sessions: Vec<Arc<Session>> = self.sessions.lock().values().cloned().collect();
        let mut infos: Vec<SessionInfo> = sessions.iter().map(|s| s.info()).collect();
        infos.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        infos
    }

    pub fn counts(&self) -> Counts {
        let sessions = self.sessions.lock();
        let mut counts =
            Counts { sessions: sessions.len(), cached_tool_bytes: self.cache.bytes(), ..Counts::default() };
        for session in sessions.values() {
            let (has_browser, agents) = session.attendance();
            counts.browsers += usize::from(has_browser);
            counts.agents += agents;
        }
        counts
    }

    /// Removes sessions unattended for longer than `ttl`; returns how many.
    pub fn remove_idle(&self, ttl: Duration) -> usize {
        let mut sessions = self.sessions.lock();
        let before = sessions.len();
        sessions.retain(|id, session| {
            let expired = session.expire_if_idle(ttl);
            if expired {
                session.mark_removed();
                tracing::info!(session = %OneLine(id), "idle session removed");
            }
            !expired
        });
        before - sessions.len()
    }

    /// Removes idle sessions every quarter of the idle TTL (within 50 ms and
    /// 10 s), until the broker drains.
    pub async fn sweep_idle(&self, ttl: Duration, shutdown: &Shutdown) {
        let every = (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(10));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = shutdown.draining() => return,
            }
            let removed = self.remove_idle(ttl);
            if removed > 0 {
                tracing::debug!(removed, "idle sessions removed");
            }
        }
    }

    /// Drops the tool lists kept for departed browsers, those that left
    /// longest ago first, until the rest fit the budget. A session nobody is
    /// attached to goes with its list; one with agents waiting stays, empty,
    /// and its agents are told. Returns how many lists were dropped.
    pub fn evict_over_budget(&self) -> usize {
        if !self.cache.over_budget() {
            return 0;
        }
        let mut sessions = self.sessions.lock();
        let mut departed: Vec<(Instant, Arc<Session>)> =
            sessions.values().filter_map(|session| Some((session.cached_since()?, session.clone()))).collect();
        departed.sort_unstable_by_key(|(left, _)| *left);
        let mut evicted = 0;
        let mut emptied = Vec::new();
        for (_, session) in departed {
            if !self.cache.over_budget() {
                break;
            }
            // Browsers attach under the map lock, which is held: still departed.
            let (bytes, agents) = session.evict_cached_tools();
            evicted += 1;
            tracing::info!(session = %OneLine(&session.id), bytes, agents, "tool list evicted (BTCP_TOOLS_BUDGET)");
            if agents == 0 {
                session.mark_removed();
                sessions.remove(&session.id);
            } else {
                emptied.push(session);
            }
        }
        drop(sessions);
        for session in emptied {
            let tools = session.tools();
            session.notify_agents("tools/updated", &ToolsUpdated { session_id: &session.id, tools: tools.json() });
            session.notify_agents("notifications/tools/list_changed", &());
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolset::ToolSet;

    #[test]
    fn idle_sessions_expire_only_when_nobody_is_attached() {
        let registry = SessionRegistry::new(10, 2, 0);
        let session = registry.attach_agent("s1", true).unwrap();
        assert_eq!(registry.remove_idle(Duration::ZERO), 0, "an agent holds it");
        session.remove_agent();
        assert_eq!(registry.remove_idle(Duration::from_secs(60)), 0, "not idle long enough");
        assert_eq!(registry.remove_idle(Duration::ZERO), 1);
        assert!(registry.get("s1").is_none());
    }

    #[test]
    fn agents_and_sessions_are_capped_and_join_needs_an_existing_session() {
        let registry = SessionRegistry::new(1, 1, 0);
        assert!(matches!(registry.attach_agent("nope", false), Err(AttachError::NotFound(_))));
        registry.attach_agent("s1", true).unwrap();
        assert!(matches!(registry.attach_agent("s1", false), Err(AttachError::TooManyAgents { .. })));
        assert!(matches!(registry.attach_agent("s2", true), Err(AttachError::TooManySessions(1))));
        assert!(registry.can_hold(Some("s1")) && !registry.can_hold(Some("s2")));
    }

    fn browser() -> BrowserSlot {
        let (_inbound, inbound_rx) = tokio::sync::mpsc::channel(1);
        let (outbound, _outbound_rx) = tokio::sync::mpsc::channel(1);
        let transport = rpc_core::Transport::channels(inbound_rx, outbound);
        let router = rpc_core::Router::<()>::new().build().unwrap();
        let (peer, _) = rpc_core::Connection::new(transport, router, Arc::new(()), rpc_core::PeerConfig::default());
        BrowserSlot { peer, client_id: "c".into() }
    }

    fn tools(bytes: usize) -> Arc<ToolSet> {
        let tool = serde_json::json!({"name": "t", "description": "d".repeat(bytes), "inputSchema": {}});
        Arc::new(ToolSet::validate(vec![tool], 1).unwrap())
    }

    /// A browser attaches to `id`, registers `bytes` of tools and leaves.
    fn depart(registry: &SessionRegistry, id: &str, bytes: usize) -> Arc<Session> {
        let slot = browser();
        let conn = slot.peer.conn_id();
        let cached = registry.counts().cached_tool_bytes;
        let session = registry.attach_browser(id, slot).unwrap().session;
        assert!(session.register_tools(conn, tools(bytes)));
        assert_eq!(registry.counts().cached_tool_bytes, cached, "a live list is not cached");
        assert!(session.detach_browser(conn));
        session
    }

    #[test]
    fn departed_lists_past_the_budget_go_oldest_first_and_live_ones_stay() {
        let registry = SessionRegistry::new(100, 4, 2500);
        let live = registry.attach_browser("live", browser()).unwrap().session;
        let conn = live.browser().unwrap().peer.conn_id();
        assert!(live.register_tools(conn, tools(5000)));
        depart(&registry, "old", 1000);
        let waited_for = depart(&registry, "waited-for", 1000);
        registry.attach_agent("waited-for", false).unwrap();
        assert_eq!(registry.evict_over_budget(), 0, "within the budget");
        depart(&registry, "new", 1000);
        assert!(registry.counts().cached_tool_bytes > 2500);
        assert_eq!(registry.evict_over_budget(), 1);
        assert!(registry.get("old").is_none(), "the oldest departure went, with its idle session");
        assert!(registry.get("new").is_some_and(|s| s.tools().len() == 1));
        assert_eq!(live.tools().len(), 1, "a connected browser's list is never evicted");

        depart(&registry, "newer", 1000);
        assert_eq!(registry.evict_over_budget(), 1);
        assert!(registry.get("waited-for").is_some(), "a session with an agent stays...");
        assert_eq!(waited_for.tools().len(), 0, "...without its list");
        assert!(registry.counts().cached_tool_bytes <= 2500);
        assert_eq!(registry.remove_idle(Duration::ZERO), 2);
        assert_eq!(registry.counts().cached_tool_bytes, 0, "removal gives the bytes back");
    }

    #[test]
    fn a_replaced_browser_cannot_overwrite_its_successors_tools() {
        let registry = SessionRegistry::new(10, 1, 0);
        let old = browser();
        let old_conn = old.peer.conn_id();
        registry.attach_browser("s", old).unwrap();
        let attached = registry.attach_browser("s", browser()).unwrap();
        assert!(attached.replaced.is_some());
        assert!(!attached.session.register_tools(old_conn, tools(10)));
        assert_eq!(attached.session.tools().len(), 0);
    }
}
