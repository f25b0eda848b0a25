//! `GET /ws`: the WebSocket transport.
//!
//! The handshake is done here rather than by a framework extractor so that the
//! connection runs on rpc-core's tokio-tungstenite adapter (its read buffer
//! exists only while there is input to take, for many idle connections) and
//! so that every refusal is a plain HTTP status with a JSON reason, sent
//! before any upgrade.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use futures_util::future::OptionFuture;
use hyper_util::rt::TokioIo;
use rpc_core::codec::websocket;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::admission::{self, PeerAddr, Rejection, reject};
use super::request;
use crate::metrics::TransportKind;
use crate::peer::{self, Opened};
use crate::state::Broker;

pub async fn upgrade(State(broker): State<Arc<Broker>>, mut request: Request) -> Response {
    let peer = request.extensions().get::<PeerAddr>().cloned();
    let query = match admission::query(request.uri()) {
        Ok(q) => q,
        Err(rejection) => return rejection.into_response(),
    };
    // Token and query problems come first: they are what a client with a
    // working WebSocket library gets wrong.
    let checked = match admission::check(&broker, request.headers(), &query, peer.as_ref()) {
        Ok(checked) => checked,
        Err(rejection) => return rejection.into_response(),
    };
    let key = match handshake_key(request.headers()) {
        Ok(key) => key,
        Err(rejection) => return rejection.into_response(),
    };
    let spec = match admission::reserve(&broker, checked, peer.as_ref(), TransportKind::WebSocket) {
        Ok(spec) => spec,
        Err(rejection) => return rejection.into_response(),
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let max_message = broker.config.max_message;
    let task_broker = broker.clone();
    // Two futures, chained: the one that lets the peer in (and holds the
    // upgrade and the request's details) is gone by the time the connection
    // runs, rather than kept beside it for the connection's life. It is
    // boxed: the task is as large as the larger of the two, and an idle
    // connection should cost what running needs, not what opening did.
    let opening = Box::pin(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let transport = websocket::server_transport(TokioIo::new(upgraded), max_message);
                Some(peer::open_peer(task_broker, transport, spec).await)
            }
            Err(e) => {
                tracing::debug!(error = %e, "websocket upgrade did not complete");
                None
            }
        }
    });
    broker.shutdown.spawn(opening.then(|opened| OptionFuture::from(opened.map(Opened::serve))));
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, key)
        .body(Body::empty())
        .expect("a valid response")
}

/// Checks the RFC 6455 handshake headers and computes the accept key.
fn handshake_key(headers: &HeaderMap) -> Result<HeaderValue, Rejection> {
    if !request::lists_token(headers, header::UPGRADE, "websocket")
        || !request::lists_token(headers, header::CONNECTION, "upgrade")
    {
        return Err(reject(
            StatusCode::UPGRADE_REQUIRED,
            "not_websocket",
            "this endpoint speaks WebSocket (Upgrade: websocket)",
        )
        .with_header(header::UPGRADE, "websocket"));
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v.as_bytes() != b"13") {
        return Err(reject(
            StatusCode::UPGRADE_REQUIRED,
            "websocket_version",
            "only WebSocket version 13 is supported",
        )
        .with_header(header::SEC_WEBSOCKET_VERSION, "13"));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(reject(StatusCode::BAD_REQUEST, "websocket_key", "Sec-WebSocket-Key is missing"));
    };
    if !request::websocket_key_valid(key.as_bytes()) {
        return Err(reject(
            StatusCode::BAD_REQUEST,
            "websocket_key",
            "Sec-WebSocket-Key must be the base64 of 16 bytes (24 characters ending in ==)",
        ));
    }
    HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|_| reject(StatusCode::BAD_REQUEST, "websocket_key", "bad key"))
}
