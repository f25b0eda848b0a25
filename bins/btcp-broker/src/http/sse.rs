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
//! engine makes unguessable on SSE browser connections.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{self, Write as _};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt, Sink, Stream};
use parking_lot::Mutex;
use rpc_core::codec::{Frame, FrameWrite};
use rpc_core::message::Kind;
use rpc_core::{Outbound, Transport};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use super::admission::{self, PeerAddr, Rejection, reject};
use super::inbox::{self, InboxReceiver, SendError};
use super::request;
use crate::metrics::TransportKind;
use crate::peer::{self, PeerSpec};
use crate::state::{Broker, SseInbox};

/// POSTed messages waiting for the peer's reader.
const INBOX: usize = 64;
/// Messages waiting to be streamed out.
const OUTBOX: usize = 256;
/// How long a POST may wait for room in a busy peer's inbox.
const POST_WAIT: Duration = Duration::from_secs(10);

/// Bytes of one client's POSTs held at once, read or waiting to be: the
/// engine's backlog (`BTCP_BACKLOG_BYTES`), which takes them from there, and
/// never less than one message.
fn post_budget(broker: &Broker) -> usize {
    broker.config.backlog_bytes.max(broker.config.max_message)
}

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
    if let Some(takeover) = request.extensions().get::<Takeover>() {
        // Served off hyper from here on (`stream`): the same head as below.
        takeover.put(Admitted { broker, spec });
        return ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")]).into_response();
    }
    let client_id = spec.client_id.clone();
    let stream_open = Arc::new(AtomicBool::new(true));
    spec.event_stream = Some(stream_open.clone());
    let (inbox_tx, mut inbox_rx) = inbox::channel(INBOX, post_budget(&broker));
    let (outbox_tx, outbox_rx) = mpsc::channel(OUTBOX);
    let inbox = SseInbox { sender: inbox_tx, stream_open: stream_open.clone() };
    broker.sse_inboxes.lock().insert(client_id.clone(), inbox);
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let task_broker = broker.clone();
    let task_id = client_id.clone();
    broker.shutdown.spawn(async move {
        let reader = futures_util::stream::poll_fn(move |cx| inbox_rx.poll_recv(cx).map(|f| f.map(Ok)));
        let writer = futures_util::sink::unfold(outbox_tx, |tx, item: Outbound| async move {
            tx.send(item).await.map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            Ok::<_, io::Error>(tx)
        });
        let transport = Transport { reader: Box::pin(reader), writer: Box::pin(writer), wants_keepalive: false };
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
    Sse::new(stream).keep_alive(KeepAlive::new().interval(peer::SSE_KEEPALIVE)).into_response()
}

/// Set on a `GET /events` read by `connection.rs` rather than by hyper: an
/// admitted client's stream is then written by [`stream`], not by hyper.
#[derive(Clone, Default)]
pub struct Takeover(Arc<Mutex<Option<Admitted>>>);

/// A client let in: its place is reserved until it is dropped.
pub struct Admitted {
    broker: Arc<Broker>,
    spec: PeerSpec,
}

impl Takeover {
    fn put(&self, admitted: Admitted) {
        *self.0.lock() = Some(admitted);
    }

    pub fn take(&self) -> Option<Admitted> {
        self.0.lock().take()
    }
}

/// Serves an admitted client's event stream on its socket, whose response
/// head is written: the peer's own task writes the events (chunked, as
/// hyper would) and watches the socket for the client's going. Nothing is
/// kept per client but the peer and the socket: no buffer while idle.
pub async fn stream<R, W>(admitted: Admitted, read: R, write: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Admitted { broker, mut spec } = admitted;
    let client_id = spec.client_id.clone();
    let stream_open = Arc::new(AtomicBool::new(true));
    spec.event_stream = Some(stream_open.clone());
    let (inbox_tx, inbox_rx) = inbox::channel(INBOX, post_budget(&broker));
    let inbox = SseInbox { sender: inbox_tx, stream_open: stream_open.clone() };
    broker.sse_inboxes.lock().insert(client_id.clone(), inbox);
    let transport = Transport {
        reader: Box::pin(Inbound { inbox: inbox_rx, socket: read, open: stream_open.clone() }),
        writer: Box::pin(EventWriter { out: write, buf: Vec::new(), written: 0 }),
        // Comments every `SSE_KEEPALIVE` (`peer.rs`): a proxy sees traffic,
        // and a client gone without a word is found by the write failing.
        wants_keepalive: true,
    };
    let ended = Ended { broker: broker.clone(), client_id, open: stream_open };
    // Opened in the HTTP connection's task, which is there anyway: the
    // peer's own task holds only the running connection.
    let opened = peer::open_peer(broker.clone(), transport, spec).await;
    broker.shutdown.spawn(opened.serve().map(move |()| drop(ended)));
}

/// Forgets a stream's inbox when its peer has ended.
struct Ended {
    broker: Arc<Broker>,
    client_id: Arc<str>,
    open: Arc<AtomicBool>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Release);
        self.broker.sse_inboxes.lock().remove(&self.client_id);
    }
}

/// What reaches the peer: the client's POSTs, and the end of its socket
/// (after its request it sends nothing; anything it does is dropped).
struct Inbound<R> {
    inbox: InboxReceiver,
    socket: R,
    open: Arc<AtomicBool>,
}

/// Reads of what a client sends after its request, dropped, per poll.
const DROPPED_READS: usize = 16;

impl<R: AsyncRead + Unpin> Stream for Inbound<R> {
    type Item = io::Result<Frame>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = this.inbox.poll_recv(cx) {
            return Poll::Ready(frame.map(Ok));
        }
        let mut scratch = [0u8; 64];
        for _ in 0..DROPPED_READS {
            let mut read = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.socket).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) if !read.filled().is_empty() => continue,
                // The client went away (hyper's rule too: no half-close).
                Poll::Ready(_) => {
                    // At once, before the peer ends: posts already queued or
                    // in flight are then refused what needs a listening client.
                    this.open.store(false, Ordering::Release);
                    return Poll::Ready(None);
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Events are buffered up to this before the sink asks to be flushed.
const WRITE_HIGH: usize = 16 * 1024;

/// The peer's outbound messages as SSE events in HTTP/1.1 chunks, written
/// to the socket. Its buffer exists only while there is something to write.
struct EventWriter<W> {
    out: W,
    buf: Vec<u8>,
    written: usize,
}

impl<W: AsyncWrite + Unpin> EventWriter<W> {
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.out).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buf = Vec::new();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> Sink<Outbound> for EventWriter<W> {
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.buf.len() >= WRITE_HIGH {
            ready!(this.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Outbound) -> io::Result<()> {
        let buf = &mut self.get_mut().buf;
        match item {
            Outbound::Message { kind, json } => encode_event(buf, event_name(kind), &json),
            Outbound::Ping => encode_chunk(buf, &[KEEPALIVE]),
            // The response's end; the socket is shut by `poll_close`.
            Outbound::Close { .. } => buf.extend_from_slice(b"0\r\n\r\n"),
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_out(cx))?;
        Pin::new(&mut this.out).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().out).poll_shutdown(cx)
    }
}

impl<W: AsyncWrite + Unpin + Send> FrameWrite for EventWriter<W> {
    fn start_send_json(self: Pin<&mut Self>, kind: Kind, json: &[u8]) -> io::Result<()> {
        encode_event(&mut self.get_mut().buf, event_name(kind), json);
        Ok(())
    }
}

/// The keep-alive comment (axum's, for the streams hyper writes).
const KEEPALIVE: &[u8] = b":\n\n";

fn event_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Notification => "message",
        Kind::Request => "request",
        Kind::Response => "response",
    }
}

/// One chunk of the response body made of `parts`.
fn encode_chunk(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let _ = write!(buf, "{len:x}\r\n");
    for part in parts {
        buf.extend_from_slice(part);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `event: <name>`, then the data with a `data: ` field per line, in one
/// chunk: byte for byte what axum's `Event` writes for the same message.
fn encode_event(buf: &mut Vec<u8>, name: &str, json: &[u8]) {
    let data = String::from_utf8_lossy(json);
    let data = data.as_bytes();
    let breaks = memchr::memchr2_iter(b'\n', b'\r', data).count();
    let len = "event: ".len() + name.len() + 1 + "data: ".len() * (1 + breaks) + data.len() + 2;
    let _ = write!(buf, "{len:x}\r\n");
    let start = buf.len();
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    let mut last = 0;
    for at in memchr::memchr2_iter(b'\n', b'\r', data) {
        buf.extend_from_slice(&data[last..=at]);
        buf.extend_from_slice(b"data: ");
        last = at + 1;
    }
    buf.extend_from_slice(&data[last..]);
    buf.extend_from_slice(b"\n\n");
    debug_assert_eq!(buf.len() - start, len);
    buf.extend_from_slice(b"\r\n");
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
                    let name = event_name(kind);
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
    // Room for the body before a byte of it is read (a body of unknown
    // length: room for the largest), so waiting POSTs hold no bodies.
    let deadline = tokio::time::Instant::now() + POST_WAIT;
    let declared = request::declared_length(&parts.headers).map_or(limit, |length| length as usize);
    let mut room = match inbox.sender.reserve(declared, deadline).await {
        Ok(room) => room,
        Err(refused) => return refused_post(refused),
    };
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(body) => body,
        Err(e) if is_length_limit(&e) => return too_large(limit),
        Err(_) => return reject(StatusCode::BAD_REQUEST, "body", "the request body could not be read").into_response(),
    };
    room.shrink_to(body.len());
    match inbox.sender.send(Frame::Message(body), room, deadline).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(refused) => refused_post(refused),
    }
}

fn refused_post(refused: SendError) -> Response {
    match refused {
        SendError::Closed => closed().into_response(),
        SendError::Timeout => {
            reject(StatusCode::SERVICE_UNAVAILABLE, "busy", "the client's queue stayed full; try again").into_response()
        }
    }
}

pub(super) fn is_length_limit(error: &axum::Error) -> bool {
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
pub(super) fn too_large(limit: usize) -> Response {
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
