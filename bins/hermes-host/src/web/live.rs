//! `GET /ws`: the page's live channel, a control connection carried over a
//! WebSocket (rpc-core's framing: one JSON-RPC message a text frame). It is
//! served the control socket's own method table, so the page can do what
//! `ctl` can and nothing more; it hears events by `subscribe` and answers
//! dialogs by `ui/attach`, like any control client.
//!
//! The handshake is done here, as the broker does, so that the connection
//! runs on rpc-core's WebSocket adapter.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use rpc_core::Connection;
use rpc_core::codec::websocket;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::site::Site;
use crate::state::ControlSession;

pub async fn upgrade(State(site): State<Arc<Site>>, mut request: Request) -> Response {
    let key = match accept_key(request.headers()) {
        Ok(key) => key,
        Err(refusal) => return refusal.into_response(),
    };
    let Ok(slot) = site.live_slots.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many pages are open").into_response();
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let serving = site.clone();
    site.shutdown.spawn(async move {
        let _slot = slot;
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(e) => return tracing::debug!(error = %e, "websocket upgrade did not complete"),
        };
        let transport = websocket::server_transport(TokioIo::new(upgraded), serving.max_message);
        let session = Arc::new(ControlSession::new(serving.host.clone()));
        let (peer, conn) = Connection::new(transport, serving.control.clone(), session, serving.peer.clone());
        tracing::info!(conn = peer.conn_id(), "page connected");
        let reason = conn.with_shutdown(&serving.shutdown).run().await;
        tracing::info!(conn = peer.conn_id(), ?reason, "page disconnected");
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, key)
        .body(Body::empty())
        .expect("a valid response")
}

/// The RFC 6455 accept key, or why this is not a WebSocket handshake.
fn accept_key(headers: &HeaderMap) -> Result<HeaderValue, (StatusCode, &'static str)> {
    let upgrade = headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return Err((StatusCode::UPGRADE_REQUIRED, "this endpoint speaks WebSocket"));
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v.as_bytes() != b"13") {
        return Err((StatusCode::UPGRADE_REQUIRED, "only WebSocket version 13 is supported"));
    }
    let key =
        headers.get(header::SEC_WEBSOCKET_KEY).ok_or((StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing"))?;
    HeaderValue::from_str(&derive_accept_key(key.as_bytes())).map_err(|_| (StatusCode::BAD_REQUEST, "bad key"))
}
