//! One session: its browser, the tools it registered, the agents that joined,
//! and the notifications those agents hear.
//!
//! The lists of browsers that left are kept within a byte budget shared by all
//! sessions ([`CachedTools`]): a list costs nothing while its browser is
//! connected (its connection's limits bound it), and past the budget the
//! registry drops the lists whose browsers left longest ago first.
//!
//! The `pub(super)` methods are the registry's: it calls them under its map
//! lock (lock order: map, then session), so that a browser cannot arrive
//! between its check and its change.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rpc_core::PeerHandle;
use rpc_core::fanout::{self, Fanout, Subscription, Topics};
use serde::{Deserialize, Serialize};
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

/// WebSocket close code sent to a browser replaced by a newer one.
pub const CLOSE_REPLACED: u16 = 4001;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Replaced<'a> {
    session_id: &'a str,
    reason: &'static str,
}

impl BrowserSlot {
    /// Tells a replaced browser so (`session/replaced`) and closes it with
    /// 4001, off the caller's task (its queue may be full). Its calls in
    /// flight fail with the close.
    pub fn dismiss(self, session_id: Arc<str>, reason: &'static str) {
        tokio::spawn(async move {
            let _ = self.peer.notify("session/replaced", Replaced { session_id: &session_id, reason }).await;
            self.peer.close(CLOSE_REPLACED, "replaced by a newer browser connection");
        });
    }
}

pub struct Session {
    pub id: Arc<str>,
    created_at: SystemTime,
    /// Whether the short-id warning was logged for this session.
    short_id_warned: AtomicBool,
    /// Set when the registry drops the session (whoever still holds it).
    removed: AtomicBool,
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
    pub fn new(budget: usize) -> CachedTools {
        CachedTools { bytes: AtomicUsize::new(0), budget }
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn over_budget(&self) -> bool {
        self.bytes() > self.budget
    }

    fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn remove(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// One row of `GET /sessions`, and a value of the cluster's directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub id: Arc<str>,
    /// In a cluster: the node that owns the session (holds its browser).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Arc<str>>,
    pub has_browser: bool,
    pub agent_count: usize,
    pub tool_count: usize,
    pub created_at: String,
    pub last_activity: String,
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

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The wall clock at `at`, in milliseconds since the epoch, without reading
/// the clock again: a call's own start time serves (one clock read a call
/// fewer on the hot path). Measured from one (wall, monotonic) pair taken at
/// the first use, so a later step of the wall clock shows only in new pairs.
fn wall_ms_at(at: Instant) -> u64 {
    static EPOCH: LazyLock<(Instant, u64)> = LazyLock::new(|| (Instant::now(), now_ms()));
    let (mono, wall) = *EPOCH;
    match at.checked_duration_since(mono) {
        Some(after) => wall + after.as_millis() as u64,
        None => wall.saturating_sub(mono.duration_since(at).as_millis() as u64),
    }
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

impl Session {
    pub(super) fn new(id: Arc<str>, cache: Arc<CachedTools>) -> Session {
        Session {
            id,
            created_at: SystemTime::now(),
            short_id_warned: AtomicBool::new(false),
            removed: AtomicBool::new(false),
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

    /// [`touch`](Self::touch) with the time already read (a call's start).
    pub fn touch_at(&self, at: Instant) {
        self.last_activity.store(wall_ms_at(at), Ordering::Relaxed);
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

    pub fn has_browser(&self) -> bool {
        self.state.lock().browser.is_some()
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

    /// Passes on a notification already made (by the session's owner on
    /// another node, in a cluster) to every agent here.
    pub fn relay_to_agents(&self, notification: Bytes) {
        self.events.publish("agents", &notification);
    }

    /// In a cluster, on a node without the session's browser: the copy of
    /// the owner's tool list. Counted against the budget like any list held
    /// without its browser. Returns false if a browser is here now.
    pub fn mirror_tools(&self, tools: Arc<ToolSet>) -> bool {
        let mut state = self.state.lock();
        if state.browser.is_some() {
            return false;
        }
        self.cache.remove(state.tools.bytes());
        self.cache.add(tools.bytes());
        state.tools = tools;
        true
    }

    /// Takes the browser out of its seat, whoever it is (its session moved to
    /// another node's browser); its agents are not told it left.
    pub fn unseat_browser(&self) -> Option<BrowserSlot> {
        let mut state = self.state.lock();
        let slot = state.browser.take()?;
        state.browser_left = Some(Instant::now());
        self.cache.add(state.tools.bytes());
        if state.agents == 0 {
            state.idle_since = Some(Instant::now());
        }
        Some(slot)
    }

    /// Whether the registry has dropped the session (idle, or evicted).
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub(super) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    pub fn agent_count(&self) -> usize {
        self.state.lock().agents
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
            node: None,
            has_browser: state.browser.is_some(),
            agent_count: state.agents,
            tool_count: state.tools.len(),
            created_at: rfc3339(self.created_at),
            last_activity: rfc3339(last),
        }
    }

    /// Seats `slot` as the browser and returns the one it unseats.
    pub(super) fn seat_browser(&self, slot: BrowserSlot) -> Option<BrowserSlot> {
        let mut state = self.state.lock();
        let replaced = state.browser.replace(slot);
        if replaced.is_none() {
            // Its list is live again: its connection answers for it now.
            self.cache.remove(state.tools.bytes());
        }
        state.idle_since = None;
        replaced
    }

    /// Counts one more agent if fewer than `max` are there; returns whether it did.
    pub(super) fn add_agent(&self, max: usize) -> bool {
        let mut state = self.state.lock();
        if state.agents >= max {
            return false;
        }
        state.agents += 1;
        state.idle_since = None;
        true
    }

    /// Whether a browser is attached, and how many agents.
    pub(super) fn attendance(&self) -> (bool, usize) {
        let state = self.state.lock();
        (state.browser.is_some(), state.agents)
    }

    /// Whether nobody has been attached for `ttl`; if so its cached list is
    /// given back to the budget, as the registry then drops the session.
    pub(super) fn expire_if_idle(&self, ttl: Duration) -> bool {
        let state = self.state.lock();
        let expired =
            state.browser.is_none() && state.agents == 0 && state.idle_since.is_some_and(|t| t.elapsed() >= ttl);
        if expired {
            self.cache.remove(state.tools.bytes());
        }
        expired
    }

    /// When its browser left, if its tool list is held for its return (the
    /// order in which lists are evicted).
    pub(super) fn cached_since(&self) -> Option<Instant> {
        let state = self.state.lock();
        let cached = state.browser.is_none() && state.tools.bytes() > 0;
        cached.then(|| state.browser_left.unwrap_or_else(Instant::now))
    }

    /// Drops the cached tool list from the budget; a session with agents
    /// waiting keeps an empty list. Returns the bytes dropped and the agents.
    pub(super) fn evict_cached_tools(&self) -> (usize, usize) {
        let mut state = self.state.lock();
        let bytes = state.tools.bytes();
        self.cache.remove(bytes);
        if state.agents > 0 {
            state.tools = Arc::new(ToolSet::empty());
        }
        (bytes, state.agents)
    }
}
