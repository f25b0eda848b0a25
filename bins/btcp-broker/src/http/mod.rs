//! The broker's one HTTP port: routes, the Origin policy, and the small
//! endpoints (`/health`, `/sessions`, `/metrics`, `/btcp.js`, `/`).

pub mod admission;
mod sse;
mod websocket;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::broker::{Broker, SERVER_VERSION};
use admission::{PeerAddr, Rejection, reject};

const BTCP_JS: &str = include_str!("../assets/btcp.js");
const INDEX_HTML: &str = include_str!("../assets/index.html");

pub fn router(broker: Arc<Broker>, mcp_doors: Arc<crate::mcp::HttpDoors>) -> Router {
    Router::new()
        .route("/mcp", any(move |request: Request| crate::mcp::endpoint(mcp_doors.clone(), request)))
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
        .with_state(broker)
}

/// Collapses repeated slashes in the request path and drops a trailing one,
/// before routing: the public btcp-client builds `ws://host:port//ws` from the
/// base URL its docs show, and `http://host:port//message` from one given with
/// a trailing slash.
pub fn normalize_path<B>(request: &mut axum::http::Request<B>) {
    let path = request.uri().path();
    if !path.contains("//") && (path.len() <= 1 || !path.ends_with('/')) {
        return;
    }
    let mut clean = String::with_capacity(path.len());
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        clean.push('/');
        clean.push_str(segment);
    }
    if clean.is_empty() {
        clean.push('/');
    }
    if let Some(query) = request.uri().query() {
        clean.push('?');
        clean.push_str(query);
    }
    let mut parts = request.uri().clone().into_parts();
    let Ok(path_and_query) = PathAndQuery::try_from(clean) else {
        return;
    };
    parts.path_and_query = Some(path_and_query);
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
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
        tracing::warn!(%peer, origin = text, path = request.uri().path(), "origin not allowed");
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

/// With no list: loopback pages only (`http(s)://localhost|127.0.0.1|[::1]`,
/// any port). With a list: exactly those origins.
pub fn origin_allowed(allowed: Option<&[String]>, origin: &str) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    if let Some(list) = allowed {
        return list.contains(&origin);
    }
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let (host, port) = match rest.strip_prefix("[::1]") {
        Some(port) => ("[::1]", port),
        None => rest.find(':').map_or((rest, ""), |i| rest.split_at(i)),
    };
    matches!(host, "localhost" | "127.0.0.1" | "[::1]") && (port.is_empty() || valid_port(port))
}

fn valid_port(text: &str) -> bool {
    text.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok())
}

async fn health(State(broker): State<Arc<Broker>>) -> Response {
    let counts = broker.sessions.counts();
    Json(json!({
        "status": "ok",
        "sessions": counts.sessions,
        "browsers": counts.browsers,
        "agents": counts.agents,
        "uptime_s": broker.uptime_s(),
        "version": SERVER_VERSION,
    }))
    .into_response()
}

async fn sessions(State(broker): State<Arc<Broker>>, request: Request) -> Response {
    if let Err(rejection) = guard(&broker, &request) {
        return rejection.into_response();
    }
    Json(broker.sessions.list()).into_response()
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

#[cfg(test)]
mod tests {
    use super::{normalize_path, origin_allowed};

    #[test]
    fn repeated_and_trailing_slashes_are_forgiven() {
        for (given, routed) in [
            ("//ws?sessionId=s&clientType=browser", "/ws?sessionId=s&clientType=browser"),
            ("/ws/", "/ws"),
            ("///events//?a=b//c", "/events?a=b//c"),
            ("//message", "/message"),
            ("/", "/"),
            ("//", "/"),
            ("/health", "/health"),
            ("http://127.0.0.1:8765//ws?x=1", "http://127.0.0.1:8765/ws?x=1"),
        ] {
            let mut request = axum::http::Request::builder().uri(given).body(()).unwrap();
            normalize_path(&mut request);
            assert_eq!(request.uri().to_string(), routed, "{given}");
        }
    }

    #[test]
    fn default_origins_are_loopback_pages_only() {
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8765",
            "http://[::1]:8080",
            "http://LOCALHOST:1/",
        ] {
            assert!(origin_allowed(None, ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil:80",
            "http://localhost:notaport",
            "chrome-extension://abc",
            "ftp://localhost",
        ] {
            assert!(!origin_allowed(None, bad), "{bad}");
        }
    }

    #[test]
    fn a_configured_list_is_matched_exactly() {
        let list = vec!["https://app.example".to_owned(), "chrome-extension://abc".to_owned()];
        assert!(origin_allowed(Some(&list), "https://app.example"));
        assert!(origin_allowed(Some(&list), "chrome-extension://abc"));
        assert!(!origin_allowed(Some(&list), "http://localhost"));
        assert!(!origin_allowed(Some(&list), "https://app.example.evil"));
    }
}
