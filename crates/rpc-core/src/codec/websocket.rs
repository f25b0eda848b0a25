//! WebSocket text frames: one JSON-RPC message or batch per text frame.
//!
//! A thin adapter over tokio-tungstenite. Choices the spec leaves to us:
//! - a binary frame closes the connection with 1003 (unsupported data): there is
//!   no id to answer to and a peer sending binary is speaking another protocol;
//! - a frame over the size limit closes with 1009 (message too big), since
//!   tungstenite cannot resume a stream after refusing a frame;
//! - pings from the other side are answered by tungstenite itself; our own
//!   pings (sent by the peer's keepalive) and any pong count as signs of life.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use super::{Frame, Outbound, Transport};

/// Default cap on one WebSocket message.
pub const DEFAULT_MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// A configuration for many mostly idle connections: tungstenite allocates its
/// read buffer up front (128 KiB by default), which is 1.2 GiB for 10 000
/// connections. 2 KiB is what one read takes in; a larger frame grows the
/// buffer to its size, so big messages are still read in big reads. Against
/// 8 KiB it saves 6 KiB an idle connection (an idle broker agent: 13 KiB ->
/// 7 KiB); a window of 64 pipelined pings then takes two reads instead of one.
/// The write buffer only grows while a burst is being written.
///
/// A server that holds many idle connections does better with [`server`].
pub fn config(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(2 * 1024)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

/// tungstenite's read buffer on a [`ReadOnDemand`] socket. tungstenite keeps
/// this buffer for the connection's life and never reads more than its size
/// in one call; under [`ReadOnDemand`] such a call is a copy out of memory,
/// not a system call, so it can be small. 256 bytes are four pipelined pings.
/// A frame larger than this still grows tungstenite's buffer to the frame's
/// size, as with [`config`].
const ON_DEMAND_READ_BUFFER: usize = 256;

/// How much one system call reads into a [`ReadOnDemand`] buffer: a window of
/// 64 pipelined pings in one read.
const READ_CHUNK: usize = 8 * 1024;

/// The server side of an upgraded connection, for a daemon that holds many
/// mostly idle ones: the socket is read through a [`ReadOnDemand`] buffer,
/// which exists only while input is waiting to be taken, and tungstenite's
/// own buffer is 256 bytes. An idle connection holds about 2 KiB less than
/// with [`config`]; a busy one reads 8 KiB a system call instead of 2 KiB.
pub async fn server<S>(io: S, max_message: usize) -> WebSocketStream<ReadOnDemand<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let config = config(max_message).read_buffer_size(ON_DEMAND_READ_BUFFER);
    WebSocketStream::from_raw_socket(ReadOnDemand::new(io), Role::Server, Some(config)).await
}

/// A socket whose reads go through a buffer that is allocated when the socket
/// has input and freed when it has none left (its read would block): an idle
/// connection holds no read buffer at all. Writes go straight through.
pub struct ReadOnDemand<S> {
    io: S,
    /// What the last system call read and the reader has not taken yet.
    chunk: Option<Box<Chunk>>,
}

/// [`READ_CHUNK`] bytes in one allocation, the bounds included. `data` is
/// never zeroed: a read fills its front, and only bytes below `end` are read
/// back (zeroing 8 KiB each time a socket had input was a twentieth of a
/// forwarded `tools/call`'s instructions).
struct Chunk {
    start: usize,
    end: usize,
    data: [MaybeUninit<u8>; CHUNK_DATA],
}

impl Chunk {
    fn new() -> Box<Chunk> {
        Box::new(Chunk { start: 0, end: 0, data: [const { MaybeUninit::uninit() }; CHUNK_DATA] })
    }

    /// What was read and not yet taken, at most `max` bytes of it.
    #[allow(unsafe_code)]
    fn unread(&self, max: usize) -> &[u8] {
        let part = &self.data[self.start..self.end.min(self.start + max)];
        // SAFETY: `end` is only ever set to the length a read filled
        // (`ReadBuf::filled`, which is initialised by its contract), and
        // `start <= end`, so every byte of `part` was written by that read.
        // `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { &*(part as *const [MaybeUninit<u8>] as *const [u8]) }
    }
}

const CHUNK_DATA: usize = READ_CHUNK - 2 * std::mem::size_of::<usize>();

impl<S> ReadOnDemand<S> {
    pub fn new(io: S) -> Self {
        ReadOnDemand { io, chunk: None }
    }

    /// Whether a read buffer is held (input read from the socket and not yet taken).
    pub fn holds_buffer(&self) -> bool {
        self.chunk.is_some()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadOnDemand<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.chunk.as_ref().is_none_or(|c| c.start == c.end) {
            // A read as large as the buffer would gain nothing from it.
            if out.remaining() >= READ_CHUNK {
                this.chunk = None;
                return Pin::new(&mut this.io).poll_read(cx, out);
            }
            let chunk = this.chunk.get_or_insert_with(Chunk::new);
            let mut buf = ReadBuf::uninit(&mut chunk.data);
            match Pin::new(&mut this.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    chunk.end = buf.filled().len();
                    chunk.start = 0;
                }
                // Nothing to read (it would block, the input ended or
                // failed), and nothing held: give the buffer back.
                other => {
                    this.chunk = None;
                    return other;
                }
            }
        }
        let chunk = this.chunk.as_mut().expect("filled above");
        let unread = chunk.unread(out.remaining());
        out.put_slice(unread);
        chunk.start += unread.len();
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadOnDemand<S> {
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

/// Wraps an established WebSocket as a transport.
pub fn transport<S>(ws: WebSocketStream<S>) -> Transport
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    Transport {
        reader: Box::pin(Reader { inner: stream, done: false }),
        writer: Box::pin(Writer { inner: sink }),
        wants_keepalive: true,
    }
}

/// The write half: each item becomes its message as it is handed over (not
/// through `SinkExt::with`, which makes and polls a future per item).
struct Writer<S> {
    inner: SplitSink<WebSocketStream<S>, Message>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sink<Outbound> for Writer<S> {
    type Error = io::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_ready_unpin(cx).map_err(to_io)
    }

    fn start_send(mut self: Pin<&mut Self>, item: Outbound) -> io::Result<()> {
        self.inner.start_send_unpin(to_message(item)).map_err(to_io)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_flush_unpin(cx).map_err(to_io)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_close_unpin(cx).map_err(to_io)
    }
}

fn to_message(item: Outbound) -> Message {
    match item {
        // Everything we serialise is UTF-8 JSON; the check is a fast scan.
        Outbound::Message { json, .. } => match Utf8Bytes::try_from(json) {
            Ok(text) => Message::Text(text),
            Err(_) => Message::Close(Some(CloseFrame { code: CloseCode::Error, reason: "invalid utf-8".into() })),
        },
        Outbound::Ping => Message::Ping(Default::default()),
        Outbound::Close { code, reason } => {
            Message::Close(Some(CloseFrame { code: code.into(), reason: reason.into() }))
        }
    }
}

fn to_io(e: WsError) -> io::Error {
    match e {
        WsError::Io(e) => e,
        WsError::ConnectionClosed | WsError::AlreadyClosed => io::ErrorKind::BrokenPipe.into(),
        other => io::Error::other(other),
    }
}

struct Reader<S> {
    inner: SplitStream<WebSocketStream<S>>,
    done: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream for Reader<S> {
    type Item = io::Result<Frame>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let item = ready!(self.inner.poll_next_unpin(cx));
            let frame = match item {
                None | Some(Ok(Message::Close(_))) => None,
                Some(Ok(Message::Text(text))) => Some(Ok(Frame::Text(text))),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => Some(Ok(Frame::Alive)),
                Some(Ok(Message::Frame(_))) => continue,
                Some(Ok(Message::Binary(_))) => {
                    Some(Ok(Frame::Unsupported { close_code: 1003, reason: "binary frames are not supported" }))
                }
                Some(Err(WsError::Capacity(_))) => {
                    Some(Ok(Frame::Unsupported { close_code: 1009, reason: "message too big" }))
                }
                Some(Err(WsError::Utf8(_))) => {
                    Some(Ok(Frame::Unsupported { close_code: 1007, reason: "invalid utf-8" }))
                }
                // The peer went away without a closing handshake (a killed
                // agent, a closed tab): the end of its input, like a clean
                // close, so that its calls are cancelled, not dropped.
                Some(Err(WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake))) => None,
                Some(Err(WsError::Protocol(_))) => {
                    Some(Ok(Frame::Unsupported { close_code: 1002, reason: "protocol error" }))
                }
                Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => None,
                Some(Err(e)) => Some(Err(to_io(e))),
            };
            if !matches!(frame, Some(Ok(Frame::Text(_) | Frame::Alive))) {
                self.done = true;
            }
            return Poll::Ready(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Kind;
    use futures_util::SinkExt;

    async fn pair() -> (Transport, WebSocketStream<tokio::io::DuplexStream>) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let server = WebSocketStream::from_raw_socket(a, Role::Server, Some(config(1024))).await;
        let client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        (transport(server), client)
    }

    #[tokio::test]
    async fn text_frames_are_messages_and_replies_are_text() {
        let (mut t, mut client) = pair().await;
        client.send(Message::text(r#"{"a":1}"#)).await.unwrap();
        assert_eq!(t.reader.next().await.unwrap().unwrap(), Frame::Text(r#"{"a":1}"#.into()));
        t.writer.send(Outbound::message(Kind::Response, r#"{"b":2}"#)).await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), Message::text(r#"{"b":2}"#));
    }

    #[tokio::test]
    async fn binary_frames_are_unsupported_with_1003() {
        let (mut t, mut client) = pair().await;
        client.send(Message::binary(vec![1, 2, 3])).await.unwrap();
        let frame = t.reader.next().await.unwrap().unwrap();
        assert!(matches!(frame, Frame::Unsupported { close_code: 1003, .. }));
        assert!(t.reader.next().await.is_none());
    }

    #[tokio::test]
    async fn oversized_messages_are_unsupported_with_1009() {
        let (mut t, mut client) = pair().await;
        client.send(Message::text("x".repeat(4096))).await.unwrap();
        let frame = t.reader.next().await.unwrap().unwrap();
        assert!(matches!(frame, Frame::Unsupported { close_code: 1009, .. }), "{frame:?}");
    }

    #[tokio::test]
    async fn on_demand_reads_big_messages_and_holds_no_buffer_when_idle() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut server = server(a, 4 << 20).await;
        let mut client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        let big = "x".repeat(3 << 20);
        let writer = tokio::spawn(async move {
            client.send(Message::text(big)).await.unwrap();
            client.send(Message::text("small")).await.unwrap();
            client
        });
        let Message::Text(text) = server.next().await.unwrap().unwrap() else { panic!() };
        assert_eq!(text.len(), 3 << 20);
        assert!(text.bytes().all(|b| b == b'x'));
        assert_eq!(server.next().await.unwrap().unwrap(), Message::text("small"));
        let mut client = writer.await.unwrap();
        // The next read finds nothing and gives the buffer back.
        assert!(futures_util::FutureExt::now_or_never(server.next()).is_none());
        assert!(!server.get_ref().holds_buffer());
        // ...and a later message is read as before.
        client.send(Message::text(r#"{"a":1}"#)).await.unwrap();
        assert_eq!(server.next().await.unwrap().unwrap(), Message::text(r#"{"a":1}"#));
        // Over the limit: refused from its header.
        tokio::spawn(async move { client.send(Message::text("x".repeat(5 << 20))).await });
        assert!(matches!(server.next().await.unwrap(), Err(WsError::Capacity(_))));
    }

    #[tokio::test]
    async fn close_carries_the_code() {
        let (mut t, mut client) = pair().await;
        t.writer.send(Outbound::Close { code: 4001, reason: "replaced".into() }).await.unwrap();
        let Message::Close(Some(frame)) = client.next().await.unwrap().unwrap() else { panic!() };
        assert_eq!(u16::from(frame.code), 4001);
        assert_eq!(frame.reason.as_str(), "replaced");
    }
}
