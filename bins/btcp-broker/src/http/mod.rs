//! The broker's one HTTP port: routes, the Host and Origin policies, and the small
//! endpoints (`/health`, `/sessions`, `/metrics`, `/btcp.js`, `/`).
//!
//! - [`connection`]: one HTTP/1.1 connection (a socket's, or in process).
//! - [`request`]: what is read from a request before routing (pure; fuzzed).
//! - [`admission`]: who may connect (token, query, capacity).
//! - `websocket`, `sse`: the two transports of browsers and agents.
//! - [`mcp`]: the `/mcp` endpoint, any session's MCP front door; its MCP
//!   sessions, capped, in `mcp_sessions`.

pub mod admission;
pub mod connection;
pub(crate) mod inbox;
pub mod mcp;
mod mcp_sessions;
pub mod request;
mod sse;
mod websocket;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use rpc_core::escape::OneLine;
use serde_json::json;

use crate::peer::SERVER_VERSION;
use crate::state::Broker;
use admission::{PeerAddr, Rejection, reject};
use connection::InProcess;
use mcp::HttpDoors;
use request::origin_allowed;

const BTCP_JS: &str = include_str!("../assets/btcp.js");
const INDEX_HTML: &str = include_str!("../assets/index.html");

pub fn router(broker: Arc<Broker>, mcp_doors: Arc<HttpDoors>) -> Router {
    Router::new()
        .route("/mcp", any(move |request: Request| mcp::endpoint(mcp_doors.clone(), request)))
        .route("/ws", get(websocket::upgrade))
        .route("/events", get(sse::events))
        .route("/message", post(sse::message))
        .route("/health", get(health))
        .route("/sessions", get(sessions))
        .route("/metrics", get(metrics))
        .route("/btcp.js", get(script))
        .route("/", get(index))
        .layer(DefaultBodyLimit::max(broker.config.max_message))
        .layer(middleware::from_fn_with_state(broker.clone(), origin_policy))
        .layer(middleware::from_fn_with_state(broker.clone(), host_policy))
        .with_state(broker)
}

/// Refuses requests naming a host the broker does not answer to (403,
/// before anything else: the Origin policy, the token, any upgrade). A
/// page on `http://attacker.example:8765` rebound to 127.0.0.1 sends no
/// Origin on its own requests but does send `Host: attacker.example:8765`.
async fn host_policy(State(broker): State<Arc<Broker>>, request: Request, next: Next) -> Response {
    // The `/mcp` endpoint's own agent connections name the listen address.
    if request.extensions().get::<InProcess>().is_some() {
        return next.run(request).await;
    }
    let host = match request.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => request.headers().get(header::HOST).map(|v| v.to_str().unwrap_or("\u{fffd}")),
    };
    // No Host at all (HTTP/1.0 from a script): no browser sends that.
    let Some(host) = host else {
        return next.run(request).await;
    };
    let config = &broker.config;
    if request::host_allowed(host, config.allowed_hosts.as_deref(), config.listen.ip().is_loopback()) {
        return next.run(request).await;
    }
    broker.metrics.rejected("host");
    let peer = request.extensions().get::<PeerAddr>().map_or("-".into(), |p| p.0.clone());
    tracing::warn!(%peer, host = %OneLine(host), path = %OneLine(request.uri().path()), "host not allowed");
    reject(
        StatusCode::FORBIDDEN,
        "host_not_allowed",
        format!("host {host:?} is not served here: use localhost or 127.0.0.1, or list it in BTCP_ALLOWED_HOSTS"),
    )
    .into_response()
}

/// Refuses requests from origins not allowed (403), answers CORS preflights,
/// and lets allowed origins read the responses (EventSource, fetch).
async fn origin_policy(State(broker): State<Arc<Broker>>, request: Request, next: Next) -> Response {
    let Some(origin) = request.headers().get(header::ORIGIN).cloned() else {
        return next.run(request).await;
    };
    let text = origin.to_str().unwrap_or("");
    if !origin_allowed(broker.config.allowed_origins.as_deref(), text) {
        broker.metrics.rejected("origin");
        let peer = request.extensions().get::<PeerAddr>().map_or("-".into(), |p| p.0.clone());
        tracing::warn!(%peer, origin = %OneLine(text), path = %OneLine(request.uri().path()), "origin not allowed");
        return reject(
            StatusCode::FORBIDDEN,
            "origin",
            format!("origin {text:?} is not allowed (BTCP_ALLOWED_ORIGINS)"),
        )
        .into_response();
    }
    let mut response = if request.method() == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, OPTIONS"));
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, x-client-id, x-session-id"),
        );
        headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        response
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// In a cluster the counts are the cluster's (its directory), with this
/// node's own under `local`, and the node's name and the live nodes.
async fn health(State(broker): State<Arc<Broker>>) -> Response {
    let counts = broker.sessions.counts();
    let mut body = json!({
        "status": "ok",
        "sessions": counts.sessions,
        "browsers": counts.browsers,
        "agents": counts.agents,
        "uptime_s": broker.uptime_s(),
        "version": SERVER_VERSION,
        "log_lines_dropped": rpc_core::log_sink::dropped_lines(),
    });
    if let Some(cluster) = &broker.cluster {
        let rows = cluster.list(broker.sessions.list());
        body["local"] = json!({ "sessions": counts.sessions, "browsers": counts.browsers, "agents": counts.agents });
        body["sessions"] = rows.len().into();
        body["browsers"] = rows.iter().filter(|r| r.has_browser).count().into();
        body["agents"] = rows.iter().map(|r| r.agent_count).sum::<usize>().into();
        body["node"] = cluster.node().into();
        body["nodes"] = json!(cluster.nodes());
    }
    Json(body).into_response()
}

async fn sessions(State(broker): State<Arc<Broker>>, request: Request) -> Response {
    if let Err(rejection) = guard(&broker, &request) {
        return rejection.into_response();
    }
    let here = broker.sessions.list();
    match &broker.cluster {
        Some(cluster) => Json(cluster.list(here)).into_response(),
        None => Json(here).into_response(),
    }
}

async fn metrics(State(broker): State<Arc<Broker>>, request: Request) -> Response {
    if let Err(rejection) = guard(&broker, &request) {
        return rejection.into_response();
    }
    let text = broker.metrics.render(broker.sessions.counts());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

/// The token check of the read-only endpoints.
fn guard(broker: &Broker, request: &Request) -> Result<(), Rejection> {
    let query = admission::query(request.uri())?;
    let peer = request.extensions().get::<PeerAddr>();
    admission::authorize(broker, request.headers(), &query, peer)
}

async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], BTCP_JS)
        .into_response()
}

async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], INDEX_HTML)
        .into_response()
}
