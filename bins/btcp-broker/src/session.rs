//! Sessions: the broker's domain model.
//!
//! A session belongs to a browser (its tool provider) and holds the tools that
//! browser registered and the agents that joined it. One browser at a time: a
//! second browser with the same id replaces the first. A browser that goes away
//! leaves its session (agents and cached tools) behind for its return; a session
//! nobody is attached to is removed after the idle TTL.
//!
//! The lists of browsers that left are kept within a byte budget shared by all
//! sessions ([`CachedTools`]): a list costs nothing while its browser is
//! connected (its connection's limits bound it), and past the budget the lists
//! whose browsers left longest ago are dropped first.
//!
//! Locking: the registry map is locked only to find, create or remove a
//! session, never on the tools/call path (an agent holds its `Arc<Session>`).
//! Lock order is map, then session.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rpc_core::PeerHandle;
use rpc_core::fanout::{self, Fanout, Subscription, Topics};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::toolset::ToolSet;

/// Who is on the other end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientType {
    Browser,
    Agent,
}

impl ClientType {
    pub fn parse(text: &str) -> Option<ClientType> {
        match text {
            "browser" => Some(ClientType::Browser),
            "agent" => Some(ClientType::Agent),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClientType::Browser => "browser",
            ClientType::Agent => "agent",
        }
    }
}

/// The browser attached to a session.
#[derive(Clone, Debug)]
pub struct BrowserSlot {
    pub peer: PeerHandle,
    pub client_id: Arc<str>,
}

pub struct Session {
    pub id: Arc<str>,
    created_at: SystemTime,
    /// Whether the short-id warning was logged for this session.
    short_id_warned: AtomicBool,
    cache: Arc<CachedTools>,
    /// Milliseconds since the Unix epoch of the last call, registration or
    /// connection change; an atomic so the call path takes no lock for it.
    last_activity: AtomicU64,
    state: Mutex<SessionState>,
    /// Notifications to the session's agents (each agent pumps its own queue).
    events: Fanout<Bytes>,
}

/// Invariant: a session's tool list is counted in [`CachedTools`] exactly
/// while it has no browser; every change of `browser` or `tools` keeps it.
struct SessionState {
    browser: Option<BrowserSlot>,
    tools: Arc<ToolSet>,
    agents: usize,
    /// When the session last became unattended (no browser, no agents).
    idle_since: Option<Instant>,
    /// When its browser last left (the eviction order of its tool list).
    browser_left: Option<Instant>,
}

/// The bytes of tool lists held for browsers that have left, and the budget
/// they must fit in.
pub struct CachedTools {
    bytes: AtomicUsize,
    budget: usize,
}

impl CachedTools {
    fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn remove(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn over_budget(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) > self.budget
    }
}

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

/// One row of `GET /sessions`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub id: Arc<str>,
    pub has_browser: bool,
    pub agent_count: usize,
    pub tool_count: usize,
    pub created_at: String,
    pub last_activity: String,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

impl Session {
    fn new(id: Arc<str>, cache: Arc<CachedTools>) -> Session {
        Session {
            id,
            created_at: SystemTime::now(),
            short_id_warned: AtomicBool::new(false),
            cache,
            last_activity: AtomicU64::new(now_ms()),
            state: Mutex::new(SessionState {
                browser: None,
                tools: Arc::new(ToolSet::empty()),
                agents: 0,
                idle_since: Some(Instant::now()),
                browser_left: None,
            }),
            events: Fanout::new(fanout::DEFAULT_QUEUE, fanout::DEFAULT_QUEUE_BYTES),
        }
    }

    pub fn touch(&self) {
        self.last_activity.store(now_ms(), Ordering::Relaxed);
    }

    /// The browser and the tool list, as one consistent snapshot.
    pub fn browser_and_tools(&self) -> (Option<PeerHandle>, Arc<ToolSet>) {
        let state = self.state.lock();
        (state.browser.as_ref().map(|b| b.peer.clone()), state.tools.clone())
    }

    pub fn tools(&self) -> Arc<ToolSet> {
        self.state.lock().tools.clone()
    }

    pub fn browser(&self) -> Option<BrowserSlot> {
        self.state.lock().browser.clone()
    }

    /// Replaces the tool list, if `conn_id` is still this session's browser
    /// (a replaced browser's late registration must not overwrite its
    /// successor's). Returns whether it was.
    pub fn register_tools(&self, conn_id: u64, tools: Arc<ToolSet>) -> bool {
        let mut state = self.state.lock();
        if state.browser.as_ref().is_none_or(|b| b.peer.conn_id() != conn_id) {
            return false;
        }
        state.tools = tools;
        drop(state);
        self.touch();
        true
    }

    /// True the first time it is asked: the short-id warning is logged once.
    pub fn first_short_id_warning(&self) -> bool {
        !self.short_id_warned.swap(true, Ordering::Relaxed)
    }

    /// Sends a notification to every agent of the session; never waits.
    pub fn notify_agents<P: Serialize>(&self, method: &str, params: &P) {
        match rpc_core::message::request(None, method, params) {
            Ok(json) => {
                self.events.publish("agents", &Bytes::from(json));
            }
            Err(e) => tracing::error!(method, error = %e, "notification did not serialise"),
        }
    }

    /// The queue of notifications for one agent.
    pub fn subscribe_agent(&self) -> Subscription<Bytes> {
        self.events.subscribe(Topics::all())
    }

    /// Detaches a browser if it is still this session's browser. Returns whether
    /// it was (a replaced browser leaving must not unseat its successor). Its
    /// tool list is then kept for its return, counted against the budget.
    pub fn detach_browser(&self, conn_id: u64) -> bool {
        let mut state = self.state.lock();
        let ours = state.browser.as_ref().is_some_and(|b| b.peer.conn_id() == conn_id);
        if ours {
            state.browser = None;
            state.browser_left = Some(Instant::now());
            self.cache.add(state.tools.bytes());
            if state.agents == 0 {
                state.idle_since = Some(Instant::now());
            }
        }
        drop(state);
        self.touch();
        ours
    }

    pub fn remove_agent(&self) {
        let mut state = self.state.lock();
        state.agents = state.agents.saturating_sub(1);
        if state.agents == 0 && state.browser.is_none() {
            state.idle_since = Some(Instant::now());
        }
        drop(state);
        self.touch();
    }

    pub fn info(&self) -> SessionInfo {
        let state = self.state.lock();
        let last = UNIX_EPOCH + Duration::from_millis(self.last_activity.load(Ordering::Relaxed));
        SessionInfo {
            id: self.id.clone(),
            has_browser: state.browser.is_some(),
            agent_count: state.agents,
            tool_count: state.tools.len(),
            created_at: rfc3339(self.created_at),
            last_activity: rfc3339(last),
        }
    }

    pub fn has_browser(&self) -> bool {
        self.state.lock().browser.is_some()
    }
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

/// Every session of the broker, by id.
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
            cache: Arc::new(CachedTools { bytes: AtomicUsize::new(0), budget: tools_budget }),
        }
    }

    /// Puts a browser in its session, creating the session if it is new, and
    /// unseats the browser that was there.
    pub fn attach_browser(&self, id: &str, slot: BrowserSlot) -> Result<Attached, AttachError> {
        let mut sessions = self.sessions.lock();
        let session = self.get_or_create(&mut sessions, id)?;
        let mut state = session.state.lock();
        let replaced = state.browser.replace(slot);
        if replaced.is_none() {
            // Its list is live again: its connection answers for it now.
            self.cache.remove(state.tools.bytes());
        }
        state.idle_since = None;
        drop(state);
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
        let mut state = session.state.lock();
        if state.agents >= self.max_agents {
            return Err(AttachError::TooManyAgents { session: session.id.clone(), max: self.max_agents });
        }
        state.agents += 1;
        state.idle_since = None;
        drop(state);
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
        tracing::info!(session = %session.id, "session created");
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
        sessions.get(id).is_none_or(|s| s.state.lock().agents < self.max_agents)
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
        let mut counts = Counts {
            sessions: sessions.len(),
            cached_tool_bytes: self.cache.bytes.load(Ordering::Relaxed),
            ..Counts::default()
        };
        for session in sessions.values() {
            let state = session.state.lock();
            counts.browsers += usize::from(state.browser.is_some());
            counts.agents += state.agents;
        }
        counts
    }

    /// Removes sessions unattended for longer than `ttl`; returns how many.
    pub fn remove_idle(&self, ttl: Duration) -> usize {
        let mut sessions = self.sessions.lock();
        let before = sessions.len();
        sessions.retain(|id, session| {
            let state = session.state.lock();
            let expired =
                state.browser.is_none() && state.agents == 0 && state.idle_since.is_some_and(|t| t.elapsed() >= ttl);
            if expired {
                self.cache.remove(state.tools.bytes());
                tracing::info!(session = %id, "idle session removed");
            }
            !expired
        });
        before - sessions.len()
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
        let mut departed: Vec<(Instant, Arc<Session>)> = sessions
            .values()
            .filter_map(|session| {
                let state = session.state.lock();
                let cached = state.browser.is_none() && state.tools.bytes() > 0;
                cached.then(|| (state.browser_left.unwrap_or_else(Instant::now), session.clone()))
            })
            .collect();
        departed.sort_unstable_by_key(|(left, _)| *left);
        let mut evicted = 0;
        let mut emptied = Vec::new();
        for (_, session) in departed {
            if !self.cache.over_budget() {
                break;
            }
            let mut state = session.state.lock();
            // Browsers attach under the map lock, which is held: still departed.
            let bytes = state.tools.bytes();
            self.cache.remove(bytes);
            evicted += 1;
            tracing::info!(session = %session.id, bytes, agents = state.agents, "tool list evicted (BTCP_TOOLS_BUDGET)");
            if state.agents == 0 {
                drop(state);
                sessions.remove(&session.id);
            } else {
                state.tools = Arc::new(ToolSet::empty());
                drop(state);
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

/// `{"sessionId": ...}`, the params of the session notifications to agents.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEvent<'a> {
    pub session_id: &'a str,
}

/// `tools/updated` params.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsUpdated<'a> {
    pub session_id: &'a str,
    pub tools: &'a RawValue,
}

#[cfg(test)]
mod tests {
    use super::*;

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
