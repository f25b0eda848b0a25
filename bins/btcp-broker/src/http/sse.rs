//! The HTTP streaming transport: `GET /events` (SSE, broker to client) and
//! `POST /message` (client to broker).
//!
//! An SSE client is an ordinary peer whose writer is the event stream and whose
//! reader is fed by its POSTs, so sessions, forwarding and errors work exactly
//! as on WebSocket, and both kinds of client meet in the same sessions. Event
//! names say what the data is: `message` (notifications, the welcome),
//! `request` (a call for the client, e.g. a forwarded tools/call), `response`
//! (the reply to something the client posted).
//!
//! A POST names its sender by client id (the welcome's `clientId`, 128 random
//! bits). The public client's HTTP transport sends only `X-Session-ID`, so a
//! POST naming only a session speaks for that session's SSE browser, unless
//! `BTCP_SSE_SESSION_FALLBACK=false`. Its reach is kept small: the browser's
//! stream must be open, and answers need the forwarded call's id, which the
//! engine makes unguessable on browser connections.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use rpc_core::codec::Frame;
use rpc_core::message::Kind;
use rpc_core::{Outbound, Transport};
use tokio::sync::mpsc;

use super::admission::{self, PeerAddr, Rejection, reject};
use super::request;
use crate::metrics::TransportKind;
use crate::peer;
use crate::state::{Broker, SseInbox};

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
    let mut spec = match admission::admit(&broker, request.headers(), &query, peer.as_ref(), TransportKind::Sse) {
        Ok(spec) => spec,
        Err(rejection) => return rejection.into_response(),
    };
    let client_id = spec.client_id.clone();
    let stream_open = Arc::new(AtomicBool::new(true));
    spec.event_stream = Some(stream_open.clone());
    let (inbox_tx, inbox_rx) = mpsc::channel(INBOX);
    let (outbox_tx, outbox_rx) = mpsc::channel(OUTBOX);
    let inbox = SseInbox { sender: inbox_tx, stream_open: stream_open.clone() };
    broker.sse_inboxes.lock().insert(client_id.clone(), inbox);
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let task_broker = broker.clone();
    let task_id = client_id.clone();
    broker.shutdown.spawn(async move {
        let transport = Transport::channels(inbox_rx, outbox_tx);
        let serve = peer::serve_peer(task_broker.clone(), transport, spec);
        tokio::pin!(serve);
        // The peer ends when the client goes away (its stream is dropped).
        tokio::select! {
            () = &mut serve => {}
            _ = ended_rx => {
                task_broker.sse_inboxes.lock().remove(&task_id);
                serve.await;
            }
        }
        task_broker.sse_inboxes.lock().remove(&task_id);
    });
    let stream = EventStream { outbox: outbox_rx, open: stream_open, ended: Some(ended_tx) };
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// The broker's outbound messages as SSE events. Dropping it (the client went
/// away) ends the peer: the SSE writer has no other way to notice.
struct EventStream {
    outbox: mpsc::Receiver<Outbound>,
    open: Arc<AtomicBool>,
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
        // At once, before the peer task gets to run: posts already queued or
        // in flight are then refused what needs a listening client.
        self.open.store(false, Ordering::Release);
        if let Some(ended) = self.ended.take() {
            let _ = ended.send(());
        }
    }
}

/// `POST /message`: one JSON-RPC message or batch from an SSE client, answered
/// 202 with an empty body (replies arrive on the client's event stream).
pub async fn message(State(broker): State<Arc<Broker>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let peer = parts.extensions.get::<PeerAddr>();
    let query = match admission::query(&parts.uri) {
        Ok(q) => q,
        Err(rejection) => return rejection.into_response(),
    };
    if let Err(rejection) = admission::authorize(&broker, &parts.headers, &query, peer) {
        return rejection.into_response();
    }
    let limit = broker.config.max_message;
    // Refused from the header, before a byte of the body: waiting for it would
    // hold the connection for as long as the client cares to send.
    if request::declared_length(&parts.headers).is_some_and(|length| length > limit as u64) {
        return too_large(limit);
    }
    let inbox = match sender_inbox(&broker, &parts.headers, &query) {
        Ok(inbox) => inbox,
        Err(rejection) => return rejection.into_response(),
    };
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(body) => body,
        Err(e) if is_length_limit(&e) => return too_large(limit),
        Err(_) => return reject(StatusCode::BAD_REQUEST, "body", "the request body could not be read").into_response(),
    };
    match inbox.sender.send_timeout(Frame::Message(body), POST_WAIT).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(mpsc::error::SendTimeoutError::Closed(_)) => closed().into_response(),
        Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
            reject(StatusCode::SERVICE_UNAVAILABLE, "busy", "the client's queue stayed full; try again").into_response()
        }
    }
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// 413, and the connection closed: the unread body is never drained.
fn too_large(limit: usize) -> Response {
    reject(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("the message is larger than {limit} bytes (BTCP_MAX_MESSAGE)"),
    )
    .with_header(header::CONNECTION, "close")
    .into_response()
}

fn unknown_client() -> Rejection {
    reject(
        StatusCode::NOT_FOUND,
        "unknown_client",
        "no open event stream for this client: connect to /events and send its clientId \
         (X-Client-ID header or clientId query)",
    )
}

fn closed() -> Rejection {
    reject(StatusCode::GONE, "closed", "this client's event stream has closed")
}

/// Finds the sender: by client id, else (the session fallback) by session id
/// and that session's browser. Either way its event stream must be open.
fn sender_inbox(broker: &Broker, headers: &HeaderMap, query: &HashMap<String, String>) -> Result<SseInbox, Rejection> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let client_id = match header("x-client-id").or(query.get("clientId").map(String::as_str)) {
        Some(id) => Arc::<str>::from(id),
        None => {
            let session_id = header("x-session-id").or(query.get("sessionId").map(String::as_str));
            let Some(session_id) = session_id else {
                return Err(unknown_client());
            };
            if !broker.config.sse_session_fallback {
                return Err(reject(
                    StatusCode::BAD_REQUEST,
                    "client_id_required",
                    "a session id does not identify a sender here (BTCP_SSE_SESSION_FALLBACK=false): send the \
                     clientId from the welcome (X-Client-ID header or clientId query)",
                ));
            }
            broker.sessions.get(session_id).and_then(|s| s.browser()).ok_or_else(unknown_client)?.client_id
        }
    };
    let inbox = broker.sse_inboxes.lock().get(&client_id).cloned().ok_or_else(unknown_client)?;
    if !inbox.stream_open.load(Ordering::Acquire) {
        return Err(closed());
    }
    Ok(inbox)
}
