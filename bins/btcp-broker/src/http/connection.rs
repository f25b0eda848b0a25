//! One HTTP/1.1 connection, from a socket or from inside the broker (the
//! `/mcp` endpoint's agent connections): the same stack serves both, so
//! admission and auth cannot differ between them.
//!
//! A socket's first request head is read here before hyper sees it. A
//! `GET /events` is routed from here (the same router, so the same Origin,
//! token, query and capacity checks): an event stream it opens is then
//! written by the peer's own task straight to the socket (`sse::stream`), so
//! an idle SSE agent keeps none of hyper's connection state (its read and
//! write buffers, 16 KiB). Anything else, and a refused `/events` once its
//! answer is written, is served by hyper as before, the bytes read so far
//! replayed first.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, Uri, Version, header};
use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Incoming;
use rpc_core::Shutdown;
use rpc_core::http::HEADER_READ_TIMEOUT;
use rpc_core::listen::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tower_service::Service as _;

use super::admission::PeerAddr;
use super::request::normalize_path;
use super::sse::{self, Takeover};

/// A first request head longer than this is left to hyper (which reads
/// and refuses heads by its own limits): an event stream's is far shorter.
const MAX_SNIFFED_HEAD: usize = 16 * 1024;
/// Headers read in a sniffed head; more is left to hyper (its limit is 100).
const MAX_SNIFFED_HEADERS: usize = 64;
/// Largest body of a refusal written from here (they are a line of JSON).
const MAX_REFUSAL_BODY: usize = 64 * 1024;

/// Serves one accepted socket until it closes, or until the broker drains.
pub async fn serve_socket(stream: Stream, peer: String, app: Router, shutdown: Shutdown) {
    let peer = PeerAddr(peer.into());
    match stream {
        Stream::Tcp(s) => serve_stream(s, peer, app, shutdown, tokio::net::TcpStream::into_split).await,
        Stream::Unix(s) => serve_stream(s, peer, app, shutdown, tokio::net::UnixStream::into_split).await,
    }
}

/// Serves one in-memory connection made inside the broker (the `/mcp`
/// endpoint's agent connections) exactly as a socket's.
pub async fn serve_in_process(io: tokio::io::DuplexStream, app: Router, shutdown: Shutdown) {
    serve_io(io, PeerAddr("in-process (mcp)".into()), Some(InProcess), app, shutdown).await
}

/// Marks the requests of a connection made inside the broker: they name the
/// listen address as their host, which the Host policy need not judge.
#[derive(Clone, Copy, Debug)]
pub struct InProcess;

/// What the first bytes of a connection turned out to be.
enum Sniffed {
    /// A complete `GET` head for `/events` (path normalised), and its length.
    Events(Box<Request<Body>>, usize),
    /// Anything else: hyper's, with what was read so far.
    Other,
    /// The client went away or never finished its head in time.
    Gone,
}

async fn serve_stream<S, R, W>(
    mut io: S,
    peer: PeerAddr,
    app: Router,
    shutdown: Shutdown,
    split: impl FnOnce(S) -> (R, W),
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::new();
    let sniffed = tokio::select! {
        sniffed = sniff(&mut io, &mut buf, &peer) => sniffed,
        () = shutdown.draining() => return,
    };
    match sniffed {
        Sniffed::Gone => {}
        Sniffed::Other => serve_io(Rewind::new(io, buf.freeze()), peer, None, app, shutdown).await,
        Sniffed::Events(request, head_len) => {
            let keep_alive = !super::request::lists_token(request.headers(), header::CONNECTION, "close");
            let takeover = Takeover::default();
            let mut request = *request;
            request.extensions_mut().insert(takeover.clone());
            let mut router = app.clone();
            let response = router.call(request).await.unwrap_or_else(|e| match e {});
            if let Some(admitted) = takeover.take() {
                let head = response_head(&response, true);
                if io.write_all(&head).await.is_err() {
                    return;
                }
                let (read, write) = split(io);
                // Bytes after the head (a client pipelining behind its event
                // stream) are never answered, as hyper would not either.
                sse::stream(admitted, read, write).await;
                return;
            }
            let (head, body) = match refusal(response).await {
                Some(written) => written,
                None => return,
            };
            if io.write_all(&head).await.is_err() || io.write_all(&body).await.is_err() || !keep_alive {
                let _ = io.shutdown().await;
                return;
            }
            buf.advance(head_len);
            serve_io(Rewind::new(io, buf.freeze()), peer, None, app, shutdown).await
        }
    }
}

/// Reads the first request head, or as much of it as tells that it is not
/// a `GET` (then at once: a `POST /message` waits for nothing).
async fn sniff<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut, peer: &PeerAddr) -> Sniffed {
    let read = async {
        loop {
            if !b"GET ".starts_with(&buf[..buf.len().min(4)]) {
                return Sniffed::Other;
            }
            match parse_events(buf, peer) {
                Parsed::Events(request, len) => return Sniffed::Events(request, len),
                Parsed::Other => return Sniffed::Other,
                Parsed::Partial if buf.len() >= MAX_SNIFFED_HEAD => return Sniffed::Other,
                Parsed::Partial => {}
            }
            buf.reserve(1024);
            match io.read_buf(buf).await {
                Ok(0) | Err(_) => return if buf.is_empty() { Sniffed::Gone } else { Sniffed::Other },
                Ok(_) => {}
            }
        }
    };
    match tokio::time::timeout(HEADER_READ_TIMEOUT, read).await {
        Ok(sniffed) => sniffed,
        // As hyper does when a head takes too long: closed without an answer.
        Err(_) => Sniffed::Gone,
    }
}

enum Parsed {
    Events(Box<Request<Body>>, usize),
    Other,
    Partial,
}

/// Whether `buf` starts with a complete head this module serves: `GET` of
/// `/events` over HTTP/1.1, without a body. Anything unusual is hyper's.
fn parse_events(buf: &[u8], peer: &PeerAddr) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_SNIFFED_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if parsed.method != Some("GET") || parsed.version != Some(1) {
        return Parsed::Other;
    }
    let Some(Ok(uri)) = parsed.path.map(Uri::try_from) else {
        return Parsed::Other;
    };
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    for h in parsed.headers.iter() {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(h.name.as_bytes()), HeaderValue::from_bytes(h.value))
        else {
            return Parsed::Other;
        };
        request.headers_mut().append(name, value);
    }
    let headers = request.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0")
        || headers.contains_key(header::UPGRADE);
    if has_body {
        return Parsed::Other;
    }
    normalize_path(&mut request);
    if request.uri().path() != "/events" {
        return Parsed::Other;
    }
    request.extensions_mut().insert(peer.clone());
    Parsed::Events(Box::new(request), len)
}

/// The status line and headers of `response`, as hyper would write them:
/// an event stream's body chunked, any other's length given.
fn response_head(response: &Response<Body>, chunked: bool) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    let status = response.status();
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in response.headers() {
        if chunked && (name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING) {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"date: ");
    head.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    head
}

/// A refusal (or any answer but an event stream), whole: its head with its
/// length, and its body.
async fn refusal(response: Response<Body>) -> Option<(Vec<u8>, Bytes)> {
    let (mut parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_REFUSAL_BODY).await.ok()?;
    parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    parts.headers.remove(header::TRANSFER_ENCODING);
    let response = Response::from_parts(parts, Body::empty());
    Some((response_head(&response, false), body))
}

async fn serve_io<I>(io: I, peer: PeerAddr, in_process: Option<InProcess>, app: Router, shutdown: Shutdown)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
        if let Some(marker) = in_process {
            request.extensions_mut().insert(marker);
        }
        normalize_path(&mut request);
        let mut app = app.clone();
        async move { Ok::<_, Infallible>(app.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    rpc_core::http::serve_connection(io, service, &shutdown, "http").await;
}

/// A connection whose first bytes were already read: they are read again
/// first, then the connection's own.
struct Rewind<I> {
    first: Bytes,
    io: I,
}

impl<I> Rewind<I> {
    fn new(io: I, first: Bytes) -> Self {
        Rewind { first, io }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.first.is_empty() {
            let n = self.first.len().min(out.remaining());
            out.put_slice(&self.first[..n]);
            self.first.advance(n);
            if self.first.is_empty() {
                // Frees the sniffing buffer.
                self.first = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, out)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
