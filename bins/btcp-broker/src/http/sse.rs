//! The HTTP streaming transport: `GET /events` (SSE, broker to client) and
//! `POST /message` (client to broker).
//!
//! An SSE client is an ordinary peer whose writer is the event stream and whose
//! reader is fed by its POSTs, so sessions, forwarding and errors work exactly
//! as on WebSocket, and both kinds of client meet in the same sessions. Event
//! names say what the data is: `message` (notifications, the welcome),
//! `request` (a call for the client, e.g. a forwarded tools/call), `response`
//! (the reply to something the client posted).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use rpc_core::codec::Frame;
use rpc_core::message::Kind;
use rpc_core::{Outbound, Transport};
use tokio::sync::mpsc;

use super::admission::{self, PeerAddr, reject};
use crate::broker::{self, Broker};
use crate::metrics::TransportKind;

/// POSTed messages waiting for the peer's reader.
const INBOX: usize = 64;
/// Messages waiting to be streamed out.
const OUTBOX: usize = 256;
/// How long a POST may wait for room in a busy peer's inbox.
const POST_WAIT: Duration = Duration::from_secs(10);

pub async fn events(State(broker): State<Arc<Broker>>, request: Request) -> Response {
    let peer = request.extensions().get::<PeerAddr>().cloned();
    let query = match admission::query(request.uri()) {
        Ok(q) => q,
        Err(rejection) => return rejection.into_response(),
    };
    let spec = match admission::admit(&broker, request.headers(), &query, peer.as_ref(), TransportKind::Sse) {
        Ok(spec) => spec,
        Err(rejection) => return rejection.into_response(),
    };
    let client_id = spec.client_id.clone();
    let (inbox_tx, inbox_rx) = mpsc::channel(INBOX);
    let (outbox_tx, outbox_rx) = mpsc::channel(OUTBOX);
    broker.sse_inboxes.lock().unwrap().insert(client_id.clone(), inbox_tx);
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let task_broker = broker.clone();
    let task_id = client_id.clone();
    broker.shutdown.spawn(async move {
        let transport = Transport::channels(inbox_rx, outbox_tx);
        let serve = broker::serve_peer(task_broker.clone(), transport, spec);
        tokio::pin!(serve);
        // The peer ends when the client goes away (its stream is dropped).
        tokio::select! {
            () = &mut serve => {}
            _ = ended_rx => {
                task_broker.sse_inboxes.lock().unwrap().remove(&task_id);
                serve.await;
            }
        }
        task_broker.sse_inboxes.lock().unwrap().remove(&task_id);
    });
    let stream = EventStream { outbox: outbox_rx, ended: Some(ended_tx) };
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// The broker's outbound messages as SSE events. Dropping it (the client went
/// away) ends the peer: the SSE writer has no other way to notice.
struct EventStream {
    outbox: mpsc::Receiver<Outbound>,
    ended: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Stream for EventStream {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return match self.outbox.poll_recv(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(None) | Poll::Ready(Some(Outbound::Close { .. })) => Poll::Ready(None),
                Poll::Ready(Some(Outbound::Ping)) => continue,
                Poll::Ready(Some(Outbound::Message { kind, json })) => {
                    let name = match kind {
                        Kind::Notification => "message",
                        Kind::Request => "request",
                        Kind::Response => "response",
                    };
                    let data = String::from_utf8_lossy(&json);
                    Poll::Ready(Some(Ok(Event::default().event(name).data(data))))
                }
            };
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        if let Some(ended) = self.ended.take() {
            let _ = ended.send(());
        }
    }
}

/// `POST /message`: one JSON-RPC message or batch from an SSE client, answered
/// 202 with an empty body (replies arrive on the client's event stream).
pub async fn message(
    State(broker): State<Arc<Broker>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<PeerAddr>,
    uri: axum::http::Uri,
    body: Bytes,
) -> Response {
    let query = match admission::query(&uri) {
        Ok(q) => q,
        Err(rejection) => return rejection.into_response(),
    };
    if let Err(rejection) = admission::authorize(&broker, &headers, &query, Some(&peer)) {
        return rejection.into_response();
    }
    let Some(inbox) = sender_inbox(&broker, &headers, &query) else {
        return reject(
            StatusCode::NOT_FOUND,
            "unknown_client",
            "no open event stream for this client: connect to /events and send its clientId \
             (X-Client-ID header or clientId query)",
        )
        .into_response();
    };
    match inbox.send_timeout(Frame::Message(body), POST_WAIT).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(mpsc::error::SendTimeoutError::Closed(_)) => {
            reject(StatusCode::GONE, "closed", "this client's event stream has closed").into_response()
        }
        Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
            reject(StatusCode::SERVICE_UNAVAILABLE, "busy", "the client's queue stayed full; try again").into_response()
        }
    }
}

/// Finds the sender: by client id, else by session id and that session's browser.
fn sender_inbox(broker: &Broker, headers: &HeaderMap, query: &HashMap<String, String>) -> Option<mpsc::Sender<Frame>> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let client_id = match header("x-client-id").or(query.get("clientId").map(String::as_str)) {
        Some(id) => Arc::<str>::from(id),
        None => {
            let session_id = header("x-session-id").or(query.get("sessionId").map(String::as_str))?;
            broker.sessions.get(session_id)?.browser()?.client_id
        }
    };
    broker.sse_inboxes.lock().unwrap().get(&client_id).cloned()
}
