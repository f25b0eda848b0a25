//! Who may connect: the checks every connect request passes before any upgrade
//! (token, query, capacity), each failure an HTTP status with a JSON reason.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rpc_core::escape::OneLine;
use rpc_core::token::token_matches;
use serde_json::json;

use super::request;
use crate::metrics::TransportKind;
use crate::peer::{self, PeerSpec};
use crate::sessions::ClientType;
use crate::state::Broker;

/// The remote address of the HTTP connection, for log lines.
#[derive(Clone, Debug)]
pub struct PeerAddr(pub Arc<str>);

/// A refused request: an HTTP status with a JSON body
/// `{"error": message, "reason": reason}`.
#[derive(Debug)]
pub struct Rejection {
    status: StatusCode,
    reason: &'static str,
    message: String,
    header: Option<(HeaderName, &'static str)>,
}

pub fn reject(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Rejection {
    Rejection { status, reason, message: message.into(), header: None }
}

impl Rejection {
    /// Adds a header to the response (e.g. `Upgrade: websocket`).
    pub fn with_header(mut self, name: HeaderName, value: &'static str) -> Self {
        self.header = Some((name, value));
        self
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.message, "reason": self.reason }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some((name, value)) = self.header {
            response.headers_mut().insert(name, HeaderValue::from_static(value));
        }
        response
    }
}

/// The query string as a map (last value wins); text that is not UTF-8 once
/// percent-decoded is a 400 (`invalid_session_id` when it is the session id).
pub fn query(uri: &axum::http::Uri) -> Result<HashMap<String, String>, Rejection> {
    request::query(uri).map_err(|request::NotUtf8 { name }| match name.as_str() {
        "sessionId" => {
            reject(StatusCode::BAD_REQUEST, "invalid_session_id", "sessionId is not UTF-8 once percent-decoded")
        }
        _ => reject(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("query string: parameter {name:?} is not UTF-8 once percent-decoded"),
        ),
    })
}

/// Checks `BTCP_AUTH_TOKEN` against the `Authorization: Bearer` header or the
/// `token` query parameter (browsers cannot set WebSocket headers).
pub fn authorize(
    broker: &Broker,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    peer: Option<&PeerAddr>,
) -> Result<(), Rejection> {
    let Some(expected) = broker.config.auth_token.as_deref() else {
        return Ok(());
    };
    let presented = request::bearer_token(headers, query);
    let ok = presented.is_some_and(|t| token_matches(expected, t));
    if ok {
        return Ok(());
    }
    broker.metrics.rejected("unauthorized");
    tracing::warn!(peer = peer.map_or("-", |p| &*p.0), presented = presented.is_some(), "authentication failed");
    Err(reject(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        match presented {
            Some(_) => "wrong token",
            None => "a token is required: Authorization: Bearer <token> or ?token=",
        },
    ))
}

/// A connect request that passed the token and query checks.
pub struct Checked {
    client_type: ClientType,
    session_id: Option<String>,
    version: String,
}

/// Validates a connect request (`/ws` or `/events`) and reserves its place.
pub fn admit(
    broker: &Arc<Broker>,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    peer: Option<&PeerAddr>,
    transport: TransportKind,
) -> Result<PeerSpec, Rejection> {
    let checked = check(broker, headers, query, peer)?;
    reserve(broker, checked, peer, transport)
}

/// The token, then `clientType`, `sessionId` and `version` from the query.
pub fn check(
    broker: &Broker,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    peer: Option<&PeerAddr>,
) -> Result<Checked, Rejection> {
    authorize(broker, headers, query, peer)?;
    let bad = |reason, message: String| {
        broker.metrics.rejected("bad_request");
        Err(reject(StatusCode::BAD_REQUEST, reason, message))
    };
    let client_type = match query.get("clientType").map(String::as_str) {
        None => {
            return bad("missing_client_type", "clientType is required: clientType=browser or clientType=agent".into());
        }
        Some(text) => match ClientType::parse(text) {
            Some(t) => t,
            None => {
                return bad("invalid_client_type", format!("clientType must be browser or agent, not {text:?}"));
            }
        },
    };
    let session_id = match request::session_id(query) {
        Ok(id) => id.map(str::to_owned),
        Err(why) => return bad("invalid_session_id", why),
    };
    let version = query.get("version").cloned().unwrap_or_else(|| peer::PROTOCOL_VERSION.to_owned());
    Ok(Checked { client_type, session_id, version })
}

/// Reserves a connection place (and checks the session and agent caps).
pub fn reserve(
    broker: &Arc<Broker>,
    checked: Checked,
    peer: Option<&PeerAddr>,
    transport: TransportKind,
) -> Result<PeerSpec, Rejection> {
    let Checked { client_type, session_id, version } = checked;
    let full = |message: String| {
        broker.metrics.rejected("capacity");
        tracing::warn!(peer = peer.map_or("-", |p| &*p.0), message = %OneLine(&message), "connection refused");
        Err(reject(StatusCode::SERVICE_UNAVAILABLE, "capacity", message))
    };
    let creates_session = client_type == ClientType::Browser || session_id.is_some();
    if creates_session && !broker.sessions.can_hold(session_id.as_deref()) {
        return full(format!("the broker holds its maximum of {} sessions", broker.config.max_sessions));
    }
    if let (ClientType::Agent, Some(id)) = (client_type, &session_id)
        && !broker.sessions.has_agent_room(id)
    {
        return full(format!(
            "session {id} already has its maximum of {} agents",
            broker.config.max_agents_per_session
        ));
    }
    let Some(slot) = broker.reserve_peer() else {
        return full(format!("the broker holds its maximum of {} connections", broker.config.max_connections));
    };
    Ok(PeerSpec {
        client_type,
        session_id,
        client_id: peer::unguessable_id().into(),
        version,
        transport,
        event_stream: None,
        slot,
    })
}
