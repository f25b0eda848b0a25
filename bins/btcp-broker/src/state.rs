//! The state every connection shares ([`Broker`]) and the state of one
//! browser or agent connection ([`ConnState`]), which every handler gets.
//!
//! At the bottom of the tree: it knows the sessions, the settings and the
//! metrics, and no method table or server code (the router is built above
//! and handed in).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use rpc_core::fanout;
use rpc_core::{PeerConfig, PeerHandle, Router, Shutdown};

use crate::cluster::Cluster;
use crate::config::Config;
use crate::metrics::{Metrics, TransportKind};
use crate::rate_limit::TokenBucket;
use crate::sessions::{ClientType, Session, SessionRegistry};

/// Everything the connections share.
pub struct Broker {
    pub config: Config,
    pub sessions: SessionRegistry,
    /// `None` for a single broker (no `BTCP_CLUSTER`).
    pub cluster: Option<Arc<Cluster>>,
    pub metrics: Metrics,
    /// Every connection's method table (`methods::router`).
    pub router: Arc<Router<ConnState>>,
    pub shutdown: Shutdown,
    /// Inbound queues of SSE peers, by client id, fed by `POST /message`.
    pub sse_inboxes: Mutex<HashMap<Arc<str>, SseInbox>>,
    started: Instant,
    peers: AtomicUsize,
}

impl Broker {
    pub fn new(
        config: Config,
        shutdown: Shutdown,
        router: Arc<Router<ConnState>>,
        cluster: Option<Arc<Cluster>>,
    ) -> Arc<Broker> {
        Arc::new(Broker {
            sessions: SessionRegistry::new(config.max_sessions, config.max_agents_per_session, config.tools_budget),
            cluster,
            metrics: Metrics::new(),
            router,
            shutdown,
            sse_inboxes: Mutex::new(HashMap::new()),
            started: Instant::now(),
            peers: AtomicUsize::new(0),
            config,
        })
    }

    pub fn uptime_s(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Reserves room for one more browser or agent connection.
    pub fn reserve_peer(self: &Arc<Self>) -> Option<PeerSlot> {
        let max = self.config.max_connections;
        self.peers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| PeerSlot { broker: self.clone() })
    }

    /// The engine's budgets and timeouts for one connection.
    pub fn peer_config(&self, client_type: ClientType, transport: TransportKind) -> PeerConfig {
        let config = &self.config;
        PeerConfig {
            keepalive: config.keepalive,
            request_timeout: config.call_timeout,
            write_stall: config.write_stall,
            write_budget: config.write_budget,
            backlog_bytes: config.backlog_bytes,
            // Answers to an SSE browser's forwarded calls may come through
            // the SSE session fallback, where the id is the only secret an
            // answer shows. A WebSocket browser's answers come only through
            // its own socket: its ids need no keyed permutation (four
            // SipHash rounds, 3 % of a forwarded call).
            unguessable_ids: client_type == ClientType::Browser && transport == TransportKind::Sse,
            ..PeerConfig::default()
        }
    }
}

/// Where `POST /message` delivers an SSE client's messages.
#[derive(Clone)]
pub struct SseInbox {
    pub sender: crate::http::inbox::InboxSender,
    /// Whether the client's event stream is still open: posts speak for a
    /// listening client only.
    pub stream_open: Arc<AtomicBool>,
}

/// One reserved connection place, given back when dropped.
pub struct PeerSlot {
    broker: Arc<Broker>,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        self.broker.peers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Per-connection state, reachable from every handler.
pub struct ConnState {
    pub broker: Arc<Broker>,
    pub client_type: ClientType,
    pub client_id: Arc<str>,
    /// A browser's session (fixed at connect) or an agent's joined session.
    pub joined: Mutex<Option<Joined>>,
    /// tools/call admission for agents.
    pub rate: Mutex<TokenBucket>,
    /// SSE clients: whether the event stream is still open.
    pub event_stream: Option<Arc<AtomicBool>>,
}

pub struct Joined {
    pub session: Arc<Session>,
    /// An agent's notification pump; aborting it unsubscribes.
    pump: Option<tokio::task::AbortHandle>,
}

impl Joined {
    /// A browser's place in its session (it hears no agent notifications).
    pub fn browser(session: Arc<Session>) -> Joined {
        Joined { session, pump: None }
    }
}

impl ConnState {
    pub fn new(
        broker: Arc<Broker>,
        client_type: ClientType,
        client_id: Arc<str>,
        event_stream: Option<Arc<AtomicBool>>,
    ) -> ConnState {
        let rate = TokenBucket::new(broker.config.rate_limit, broker.config.rate_burst);
        ConnState { broker, client_type, client_id, joined: Mutex::new(None), rate: Mutex::new(rate), event_stream }
    }

    pub fn session(&self) -> Option<Arc<Session>> {
        self.joined.lock().as_ref().map(|j| j.session.clone())
    }

    /// False once an SSE client's event stream has closed (WebSocket: always true).
    pub fn is_listening(&self) -> bool {
        self.event_stream.as_ref().is_none_or(|open| open.load(Ordering::Acquire))
    }

    /// Makes this agent a member of `session` (already counted there) and
    /// starts forwarding the session's notifications to it.
    pub fn join(&self, peer: &PeerHandle, session: Arc<Session>) {
        let subscription = session.subscribe_agent();
        let pump = tokio::spawn(fanout::pump(subscription, peer.clone(), |count| {
            rpc_core::message::request(None, "notifications/missed", &serde_json::json!({ "count": count }))
                .unwrap_or_default()
        }));
        let previous = self.joined.lock().replace(Joined { session, pump: Some(pump.abort_handle()) });
        if let Some(previous) = previous {
            self.broker.leave(previous);
        }
    }

    /// Leaves the joined session, if any; returns its id.
    pub fn leave(&self) -> Option<Arc<str>> {
        let joined = self.joined.lock().take()?;
        let id = joined.session.id.clone();
        self.broker.leave(joined);
        Some(id)
    }
}

impl Broker {
    fn leave(&self, joined: Joined) {
        if let Some(pump) = joined.pump {
            pump.abort();
        }
        joined.session.remove_agent();
        if let Some(cluster) = &self.cluster {
            cluster.agent_left(&joined.session);
        }
    }
}
