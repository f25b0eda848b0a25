//! The life of one browser or agent connection, whatever its transport
//! (`http/websocket.rs`, `http/sse.rs`): attach to a session, welcome, serve,
//! detach. Also what the broker says of itself to every peer: its versions
//! and the ids it gives.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures_util::FutureExt;
use rpc_core::escape::OneLine;
use rpc_core::peer::CloseReason;
use rpc_core::{Connection, PeerHandle, Transport};
use serde::Serialize;

use crate::errors;
use crate::metrics::TransportKind;
use crate::sessions::{AttachError, BrowserSlot, ClientType, Session, SessionEvent};
use crate::state::{Broker, ConnState, Joined, PeerSlot};

/// Version of the BTCP protocol spoken (the public client's default).
pub const PROTOCOL_VERSION: &str = "1.0.0";
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How often an idle event stream says it is alive (a comment).
pub const SSE_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Chosen session ids shorter than this (nanoid's default length, about 126
/// random bits) are warned about when the SSE session fallback is on.
const GUESSABLE_SESSION_ID: usize = 21;

/// 128 random bits as 32 hex digits: the ids the broker gives sessions and
/// clients, which with the SSE fallback are what a POST must show.
pub fn unguessable_id() -> String {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).expect("the operating system's random source");
    bits.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the connect request said about the peer.
pub struct PeerSpec {
    pub client_type: ClientType,
    pub session_id: Option<String>,
    pub client_id: Arc<str>,
    pub version: String,
    pub transport: TransportKind,
    /// SSE clients: whether the event stream is still open.
    pub event_stream: Option<Arc<AtomicBool>>,
    pub slot: PeerSlot,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Welcome<'a> {
    session_id: Option<&'a str>,
    client_id: &'a str,
    client_type: ClientType,
    server_version: &'static str,
    protocol_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    available_sessions: Option<Vec<Arc<str>>>,
}

/// Serves one browser or agent until it goes: attach, welcome, run, detach.
pub async fn serve_peer(broker: Arc<Broker>, transport: Transport, spec: PeerSpec) {
    open_peer(broker, transport, spec).await.serve().await;
}

/// A peer attached and welcomed (or told why not): what is left is to run its
/// connection, then detach it.
///
/// The two halves are separate futures so that a connection's task does not
/// carry the first while it runs the second: an `async fn` doing both keeps
/// its arguments and the locals borrowed before the run beside the
/// connection's future for the connection's whole life. For a WebSocket
/// agent that took the task's future from 2136 to 2800 bytes, and its
/// allocation from mimalloc's 2.5 KiB class to its 3 KiB one (B8).
/// See [`Opened::serve`].
pub struct Opened {
    conn: Connection<ConnState>,
    /// Given back when the connection has ended.
    slot: PeerSlot,
    /// `None` when the peer was refused: its connection only says why.
    after: Option<AfterRun>,
}

/// What detaching a peer needs, held while its connection runs: kept small.
struct AfterRun {
    broker: Arc<Broker>,
    state: Arc<ConnState>,
    peer: PeerHandle,
    client_type: ClientType,
    transport_kind: TransportKind,
}

/// Attaches a peer to its session and welcomes it.
pub async fn open_peer(broker: Arc<Broker>, transport: Transport, spec: PeerSpec) -> Opened {
    let PeerSpec { client_type, session_id, client_id, version, transport: transport_kind, event_stream, slot } = spec;
    let state = Arc::new(ConnState::new(broker.clone(), client_type, client_id.clone(), event_stream));
    let mut config = broker.peer_config(client_type, transport_kind);
    if transport_kind == TransportKind::Sse {
        // An event stream written by its peer (`http/sse.rs`) sends a comment
        // this often, and no answer is ever expected.
        config.keepalive = SSE_KEEPALIVE;
        config.keepalive_misses = u32::MAX;
    }
    let (peer, conn) = Connection::new(transport, broker.router.clone(), state.clone(), config);
    let session = match attach(&broker, &state, &peer, session_id, transport_kind).await {
        Ok(session) => session,
        Err(error) => {
            refuse(&peer, &client_id, &error).await;
            return Opened { conn, slot, after: None };
        }
    };
    welcome(&broker, &state, &peer, session.as_ref()).await;
    // In a cluster a browser's node takes its session before the browser is
    // served (its messages wait): welcomed first, so that a browser losing a
    // race with one on another node hears `welcome`, then `session/replaced`.
    if let (ClientType::Browser, Some(cluster), Some(session)) = (client_type, &broker.cluster, &session) {
        cluster.claim(session).await;
    }
    broker.metrics.peer_opened(client_type, transport_kind);
    tracing::info!(
        conn = peer.conn_id(),
        client = %client_id,
        client_type = client_type.as_str(),
        transport = transport_kind.as_str(),
        session = %OneLine(session.as_ref().map_or("-", |s| &*s.id)),
        version = %OneLine(&version),
        "peer connected"
    );
    let conn = conn.with_shutdown(&broker.shutdown);
    Opened { conn, slot, after: Some(AfterRun { broker, state, peer, client_type, transport_kind }) }
}

/// A browser takes its session (a new one when it named none); an agent that
/// named a session joins it, waiting for its browser if need be. In a
/// cluster an agent follows a session owned elsewhere.
async fn attach(
    broker: &Broker,
    state: &ConnState,
    peer: &PeerHandle,
    session_id: Option<String>,
    transport_kind: TransportKind,
) -> Result<Option<Arc<Session>>, AttachError> {
    match state.client_type {
        ClientType::Browser => {
            let chosen = session_id.is_some();
            let id = session_id.unwrap_or_else(unguessable_id);
            let session = attach_browser(broker, state, peer, &id)?;
            if chosen && transport_kind == TransportKind::Sse {
                warn_if_guessable(broker, &session);
            }
            Ok(Some(session))
        }
        ClientType::Agent => match session_id {
            Some(id) => {
                let session = broker.sessions.attach_agent(&id, true)?;
                follow(broker, &session).await?;
                Ok(Some(session))
            }
            None => Ok(None),
        },
    }
}

/// In a cluster, an agent counted in a session whose browser is elsewhere
/// is counted by its owner too, and hears its events; past the session's
/// limit across the cluster it is taken out again.
pub async fn follow(broker: &Broker, session: &Arc<Session>) -> Result<(), AttachError> {
    let Some(cluster) = &broker.cluster else { return Ok(()) };
    if let Err(max) = cluster.follow(session).await {
        session.remove_agent();
        cluster.agent_left(session);
        return Err(AttachError::TooManyAgents { session: session.id.clone(), max });
    }
    Ok(())
}

/// Checked before the upgrade too; this is the rare race past it: the peer
/// is told why and closed.
async fn refuse(peer: &PeerHandle, client_id: &str, error: &AttachError) {
    tracing::warn!(%client_id, error = %OneLine(&error.to_string()), "connection refused");
    let notice = serde_json::json!({"code": errors::CONNECTION, "message": error.to_string()});
    let _ = peer.notify("error", notice).await;
    peer.close(1013, "session or broker full");
}

/// The `welcome` notification; an agent then hears its session's events.
async fn welcome(broker: &Broker, state: &ConnState, peer: &PeerHandle, session: Option<&Arc<Session>>) {
    let client_type = state.client_type;
    let available_sessions = (client_type == ClientType::Agent).then(|| {
        let here = broker.sessions.with_browser();
        match &broker.cluster {
            Some(cluster) => cluster.with_browser(here),
            None => here,
        }
    });
    let welcome = Welcome {
        session_id: session.map(|s| &*s.id),
        client_id: &state.client_id,
        client_type,
        server_version: SERVER_VERSION,
        protocol_version: PROTOCOL_VERSION,
        available_sessions,
    };
    let _ = peer.notify("welcome", &welcome).await;
    if let (ClientType::Agent, Some(session)) = (client_type, session) {
        state.join(peer, session.clone());
    }
}

impl Opened {
    /// Runs the connection until either side closes it, then detaches the
    /// peer. A plain `Map` over the connection's future: nothing but what
    /// detaching needs is kept beside it.
    pub fn serve(self) -> impl Future<Output = ()> + Send + 'static {
        let Opened { conn, slot, after } = self;
        conn.run().map(move |reason| {
            if let Some(after) = after {
                after.detach(reason);
            }
            drop(slot);
        })
    }
}

impl AfterRun {
    fn detach(self, reason: CloseReason) {
        let AfterRun { broker, state, peer, client_type, transport_kind } = self;
        match client_type {
            ClientType::Browser => {
                if let Some(session) = state.session() {
                    // A replaced browser leaving must not unseat its successor.
                    if session.detach_browser(peer.conn_id()) {
                        session.notify_agents("session/browserDisconnected", &SessionEvent { session_id: &session.id });
                    }
                    let evicted = broker.sessions.evict_over_budget();
                    broker.metrics.tool_lists_evicted(evicted);
                }
            }
            ClientType::Agent => {
                state.leave();
            }
        }
        broker.metrics.peer_closed(client_type, transport_kind);
        tracing::info!(
            conn = peer.conn_id(),
            client = %state.client_id,
            client_type = client_type.as_str(),
            ?reason,
            "peer disconnected"
        );
    }
}

/// With the SSE session fallback on, a browser's session id is what a POST
/// needs to speak for it: say so once per session when the id is short enough
/// to guess.
fn warn_if_guessable(broker: &Broker, session: &Session) {
    if broker.config.sse_session_fallback && session.id.len() < GUESSABLE_SESSION_ID && session.first_short_id_warning()
    {
        tracing::warn!(
            session = %OneLine(&session.id),
            "session id {:?} is short and the SSE session fallback is on: whoever knows or guesses it can \
             speak as this session's browser (register tools); use a long random id, or set \
             BTCP_SSE_SESSION_FALLBACK=false and post with the clientId",
            session.id
        );
    }
}

/// Seats the browser in session `id`; the browser it replaces is told and
/// closed, and the session's agents hear that a browser is there.
fn attach_browser(
    broker: &Broker,
    state: &ConnState,
    peer: &PeerHandle,
    id: &str,
) -> Result<Arc<Session>, AttachError> {
    let attached =
        broker.sessions.attach_browser(id, BrowserSlot { peer: peer.clone(), client_id: state.client_id.clone() })?;
    let session = attached.session;
    *state.joined.lock() = Some(Joined::browser(session.clone()));
    if let Some(old) = attached.replaced {
        tracing::info!(session = %OneLine(&session.id), old = %old.client_id, new = %state.client_id, "browser replaced");
        old.dismiss(session.id.clone(), "another browser connected with this session id");
    }
    session.notify_agents("session/browserConnected", &SessionEvent { session_id: &session.id });
    Ok(session)
}
