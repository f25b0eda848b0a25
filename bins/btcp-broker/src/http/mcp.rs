//! `/mcp?sessionId=ID`: the MCP front door of any session over streamable
//! HTTP on the broker's own port. Each session asked for gets a door
//! (`mcp_door.rs`) whose agent connection is made in process: an in-memory
//! stream served by the broker's own HTTP stack, so the broker's admission,
//! limits and rate limit apply to it as to any agent.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use http_body_util::BodyExt as _;
use mcp_front::CancellationToken;
use rpc_core::RpcError;
use serde_json::{Value, json};
use tower_service::Service as _;

use super::admission::{self, PeerAddr, reject};
use super::connection::serve_in_process;
use super::mcp_sessions::{CappedSessions, SessionSlots};
use super::request;
use super::sse::{is_length_limit, too_large};
use crate::errors;
use crate::mcp_door::{Dial, ServeInProcess, SessionDoor};
use crate::state::Broker;

/// The `/mcp` endpoint's doors, one per session id asked for. A door with no
/// request and no response streaming for `BTCP_MCP_IDLE` is closed, so its
/// agent connection does not keep a session alive forever.
pub struct HttpDoors {
    broker: Arc<Broker>,
    /// The broker's HTTP routes, which the in-process agent connections are
    /// served by (set once, right after they are built).
    app: std::sync::OnceLock<axum::Router>,
    doors: Mutex<HashMap<String, HttpDoor>>,
    /// The live MCP sessions of every door, at most BTCP_MAX_MCP_SESSIONS.
    slots: SessionSlots,
    /// Fires just before the drain's grace period ends: the doors answer
    /// the calls still running `shutting_down`.
    calls_end: CancellationToken,
    /// Fires when the drain's grace period is over: every door closes its
    /// MCP sessions.
    stop_all: CancellationToken,
}

struct HttpDoor {
    service: McpService,
    /// Cloned for each request being served and each response body still
    /// streaming (an SSE stream included): while a clone lives, the door is
    /// in use.
    in_use: Arc<()>,
    last_used: Instant,
    stop: CancellationToken,
    sessions: Arc<CappedSessions>,
}

type McpService = mcp_front::rmcp::transport::streamable_http_server::StreamableHttpService<
    mcp_front::Front<SessionDoor>,
    CappedSessions,
>;

/// At most this many sessions served over `/mcp` at once.
const MAX_HTTP_DOORS: usize = 1024;

/// An MCP session is closed after BTCP_MAX_CALL_TIMEOUT and this long
/// without a message either way.
const SESSION_IDLE_MARGIN: Duration = Duration::from_secs(30);

/// How long before the drain's grace period ends the doors answer their
/// calls still running themselves: at its end the engine drops HTTP
/// connections at once, and the engine's own `shutting_down` answer, given
/// then, would never be written to the MCP client.
const ANSWER_BEFORE_CUT: Duration = Duration::from_millis(100);

impl HttpDoors {
    pub fn new(broker: Arc<Broker>) -> Arc<Self> {
        let stop_all = CancellationToken::new();
        let slots = SessionSlots::new(broker.config.max_mcp_sessions);
        let doors = Arc::new(HttpDoors {
            broker,
            app: Default::default(),
            doors: Mutex::default(),
            slots,
            calls_end: CancellationToken::new(),
            stop_all,
        });
        tokio::spawn(doors.clone().close_idle());
        doors
    }

    pub fn set_app(&self, app: axum::Router) {
        let _ = self.app.set(app);
    }

    /// The MCP service for `session`, made on first use, and the door's
    /// in-use mark to hold while serving. `None` when too many sessions are
    /// served already.
    pub fn service(&self, session: &str) -> Option<(McpService, Arc<()>)> {
        let mut doors = self.doors.lock();
        if let Some(entry) = doors.get_mut(session) {
            entry.last_used = Instant::now();
            return Some((entry.service.clone(), entry.in_use.clone()));
        }
        if doors.len() >= MAX_HTTP_DOORS {
            return None;
        }
        let config = &self.broker.config;
        let dial = Dial::InProcess { authority: config.listen.to_string(), serve: self.serve_in_process()? };
        let door = SessionDoor::new(dial, session, config.auth_token.clone(), None, Some(self.calls_end.clone()));
        let stop = self.stop_all.child_token();
        door.keep_connected(stop.clone());
        let factory_door = door.clone();
        // Host and Origin are the broker's business (its token and Origin
        // policy run before this service); rmcp's own checks would only
        // disagree with BTCP_HOST and BTCP_ALLOWED_ORIGINS.
        let http = mcp_front::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
            .with_allowed_hosts(Vec::<String>::new())
            .with_cancellation_token(stop.clone());
        // A session silent for longer than a call may wait for its browser
        // could be one whose call is still running: rmcp's idle expiry
        // counts no silence as a call in flight.
        let sessions = Arc::new(CappedSessions::new(self.slots.clone(), config.max_call_timeout + SESSION_IDLE_MARGIN));
        let service = McpService::new(move || Ok(mcp_front::Front::new(factory_door.clone())), sessions.clone(), http);
        let in_use = Arc::new(());
        let last_used = Instant::now();
        let entry = HttpDoor { service: service.clone(), in_use: in_use.clone(), last_used, stop, sessions };
        doors.insert(session.to_owned(), entry);
        Some((service, in_use))
    }

    /// How a door's agent connection is served: by the broker's routes, as a
    /// socket's would be. `None` before the routes are set.
    fn serve_in_process(&self) -> Option<ServeInProcess> {
        let app = self.app.get()?.clone();
        let shutdown = self.broker.shutdown.clone();
        Some(Arc::new(move |io| {
            tokio::spawn(serve_in_process(io, app.clone(), shutdown.clone()));
        }))
    }

    async fn close_idle(self: Arc<Self>) {
        let idle = self.broker.config.mcp_idle;
        let mut ticks = tokio::time::interval((idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(30)));
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = self.broker.shutdown.draining() => return self.drain().await,
            }
            self.doors.lock().retain(|_, entry| {
                // Only the map holds the mark: no request or response is in flight.
                let unused = Arc::strong_count(&entry.in_use) == 1 && entry.last_used.elapsed() >= idle;
                if unused {
                    entry.stop.cancel();
                }
                !unused
            });
        }
    }

    /// The broker drains: `/mcp` takes no new request (`endpoint`), and the
    /// requests in flight get the grace period, as on every transport. What
    /// would hold a connection open for nothing (a session's GET stream)
    /// closes now; calls still running just before the grace ends are
    /// answered `shutting_down` by their doors; then every door closes.
    async fn drain(&self) {
        let shutdown = &self.broker.shutdown;
        let answer_at =
            tokio::time::Instant::now() + self.broker.config.shutdown_grace.saturating_sub(ANSWER_BEFORE_CUT);
        let sessions: Vec<_> = self.doors.lock().values().map(|door| door.sessions.clone()).collect();
        for door in sessions {
            door.close_standalone_streams().await;
        }
        tokio::select! {
            () = tokio::time::sleep_until(answer_at) => self.calls_end.cancel(),
            () = shutdown.aborted() => {}
        }
        shutdown.aborted().await;
        self.stop_all.cancel();
    }
}

/// `/mcp?sessionId=ID`: the broker's token applies (the Origin policy ran
/// before), then the session's MCP service answers.
pub async fn endpoint(doors: Arc<HttpDoors>, request: axum::extract::Request) -> axum::response::Response {
    let broker = &doors.broker;
    let query = match admission::query(request.uri()) {
        Ok(query) => query,
        Err(rejection) => return rejection.into_response(),
    };
    if let Err(rejection) =
        admission::authorize(broker, request.headers(), &query, request.extensions().get::<PeerAddr>())
    {
        return rejection.into_response();
    }
    let session = match request::session_id(&query) {
        Ok(Some(session)) => session,
        Ok(None) => {
            return reject(StatusCode::BAD_REQUEST, "session_id", "sessionId is required: /mcp?sessionId=ID")
                .into_response();
        }
        Err(why) => return reject(StatusCode::BAD_REQUEST, "invalid_session_id", why).into_response(),
    };
    let ending_session = request.method() == axum::http::Method::DELETE;
    // A posted JSON body is kept: rmcp answers one it cannot read 415, which
    // MCP keeps for a wrong Content-Type; we answer it as JSON-RPC instead.
    let (request, posted_json) = if request.method() == axum::http::Method::POST && declares_json(request.headers()) {
        match buffered(request, broker.config.max_message).await {
            Ok((request, body)) => (request, Some(body)),
            Err(refused) => return refused,
        }
    } else {
        (request, None)
    };
    if broker.shutdown.is_draining() {
        return shutting_down(posted_json.as_deref().map_or(Value::Null, request_id));
    }
    // Room for the session an `initialize` opens, before anything is made for it.
    let opening = posted_json.as_deref().and_then(|body| opens_session(request.headers(), body));
    let slot = match opening {
        Some(id) => match doors.slots.take() {
            Some(slot) => Some(slot),
            None => return too_many_sessions(id, doors.slots.max()),
        },
        None => None,
    };
    let Some((mut service, in_use)) = doors.service(session) else {
        return reject(
            StatusCode::SERVICE_UNAVAILABLE,
            "mcp_sessions",
            format!("too many sessions served over /mcp (at most {MAX_HTTP_DOORS})"),
        )
        .into_response();
    };
    let served = match slot {
        Some(slot) => SessionSlots::serving(slot, service.call(request)).await,
        None => service.call(request).await,
    };
    let mut response = match served {
        Ok(response) => response.map(|body| holding(body, in_use)),
        Err(never) => match never {},
    };
    if let Some(body) = posted_json
        && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
    {
        return unreadable(&body);
    }
    // rmcp answers a session's end 202 Accepted; MCP clients (the official
    // SDKs) expect 200 (or 204) and take anything else as a failed close.
    if ending_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// The id of the `initialize` request `body` is, when it asks for a new
/// session (no `Mcp-Session-Id`): `None` for anything else.
fn opens_session(headers: &axum::http::HeaderMap, body: &[u8]) -> Option<Value> {
    if headers.contains_key("mcp-session-id") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Request {
        method: Option<String>,
        #[serde(default)]
        id: Value,
    }
    let request: Request = serde_json::from_slice(body).ok()?;
    (request.method.as_deref() == Some("initialize")).then_some(request.id)
}

/// The id of the JSON-RPC request `body` is, or null.
fn request_id(body: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct Request {
        #[serde(default)]
        id: Value,
    }
    serde_json::from_slice::<Request>(body).map_or(Value::Null, |request| request.id)
}

/// HTTP 503 with the engine's JSON-RPC error for a request arriving while
/// the broker drains.
fn shutting_down(id: Value) -> axum::response::Response {
    let error = json!({"jsonrpc": "2.0", "id": id, "error": errors::shutting_down()});
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(error)).into_response()
}

/// HTTP 503 with the JSON-RPC error an MCP client reads as the
/// `initialize`'s answer: the broker holds its most MCP sessions.
fn too_many_sessions(id: Value, max: usize) -> axum::response::Response {
    let message = format!("too many MCP sessions (at most {max}, BTCP_MAX_MCP_SESSIONS); try again later");
    let data = json!({"reason": "mcp_sessions", "maxMcpSessions": max});
    let error =
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": errors::CONNECTION, "message": message, "data": data}});
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(error)).into_response()
}

/// Whether the request says its body is JSON, by rmcp's own rule (the media
/// type before any `;`, any case).
fn declares_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    value.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json")
}

/// The request with its body read (at most `limit` bytes, as `/message`),
/// and a copy of that body.
async fn buffered(
    request: axum::extract::Request,
    limit: usize,
) -> Result<(axum::extract::Request, axum::body::Bytes), axum::response::Response> {
    let (parts, body) = request.into_parts();
    if request::declared_length(&parts.headers).is_some_and(|length| length > limit as u64) {
        return Err(too_large(limit));
    }
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(body) => body,
        Err(e) if is_length_limit(&e) => return Err(too_large(limit)),
        Err(_) => {
            return Err(reject(StatusCode::BAD_REQUEST, "body", "the request body could not be read").into_response());
        }
    };
    Ok((axum::extract::Request::from_parts(parts, axum::body::Body::from(body.clone())), body))
}

/// HTTP 400 with the JSON-RPC error for a posted body rmcp could not read, as
/// the MCP SDKs' servers answer and their clients read it: not JSON → -32700;
/// a method whose params are no object → -32602; any other JSON → -32600.
/// The id is the message's when it has one (JSON-RPC: null if unknown).
fn unreadable(body: &[u8]) -> axum::response::Response {
    let (id, code, message) = match serde_json::from_slice::<Value>(body) {
        Err(e) => (Value::Null, RpcError::PARSE_ERROR, format!("Parse error: the body is not JSON: {e}")),
        Ok(message) => {
            let id = match &message["id"] {
                id @ (Value::String(_) | Value::Number(_)) => id.clone(),
                _ => Value::Null,
            };
            match (message.get("method").and_then(Value::as_str), message.get("params")) {
                (Some(method), Some(params)) if !params.is_object() => {
                    (id, RpcError::INVALID_PARAMS, format!("Invalid params: {method}'s params must be an object"))
                }
                _ => (
                    id,
                    RpcError::INVALID_REQUEST,
                    "Invalid Request: not a JSON-RPC 2.0 request, notification or response that MCP defines".to_owned(),
                ),
            }
        }
    };
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
}

/// `body`, holding the door's in-use mark until it has been sent or dropped
/// (an SSE stream: until it ends).
fn holding<B>(body: B, in_use: Arc<()>) -> axum::body::Body
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    axum::body::Body::new(body.map_frame(move |frame| {
        let _held = &in_use;
        frame
    }))
}
