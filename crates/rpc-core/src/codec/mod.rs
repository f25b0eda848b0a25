//! Framings: how JSON-RPC messages are cut out of a byte stream and put back in.
//!
//! Each framing turns a transport into a [`Transport`]: a stream of inbound
//! [`Frame`]s and a sink of [`Outbound`] items. The peer only ever sees those two
//! types, so it does not know (or care) whether it is talking NDJSON over TCP,
//! Content-Length over a child's pipes, or WebSocket text frames.

pub mod content_length;
pub mod ndjson;
mod sniff;
pub mod websocket;

use std::io;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_util::{Sink, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};

pub use content_length::ContentLengthCodec;
pub use ndjson::{Line, Lines, NdjsonCodec, NdjsonLines, Next};
pub use sniff::Sniffed;

use crate::message::Kind;

/// Default cap on one NDJSON line or one Content-Length body.
pub const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One unit read from a transport.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// One JSON text (a message or a batch), not yet parsed.
    Message(Bytes),
    /// The same from a framing that has checked it is UTF-8 (a WebSocket
    /// text frame), so it is not checked again.
    Text(Utf8Bytes),
    /// Every complete NDJSON line one read brought, to be taken one at a
    /// time where they lie ([`NdjsonLines`]).
    Lines(Lines),
    /// A message over the size limit was skipped without being buffered. Framings
    /// that could look at its first bytes say what it seemed to be; `None` means
    /// nothing is known and it is answered with `id: null`.
    TooLarge(Option<Sniffed>),
    /// A sign of life without content (a WebSocket pong).
    Alive,
    /// Something the framing cannot carry on from: the peer closes the connection,
    /// with this WebSocket close code where that means something.
    Unsupported { close_code: u16, reason: &'static str },
}

/// One unit written to a transport.
#[derive(Clone, Debug, PartialEq)]
pub enum Outbound {
    /// One serialised JSON text, without framing.
    Message { kind: Kind, json: Bytes },
    /// A liveness probe; only WebSocket sends anything for it.
    Ping,
    /// The last item: close the transport (with a WebSocket close code and reason).
    Close { code: u16, reason: String },
}

impl Outbound {
    pub fn message(kind: Kind, json: impl Into<Bytes>) -> Self {
        Outbound::Message { kind, json: json.into() }
    }
}

pub type FrameStream = Pin<Box<dyn Stream<Item = io::Result<Frame>> + Send>>;
pub type FrameSink = Pin<Box<dyn FrameWrite>>;

/// A transport's write side: a sink of [`Outbound`] items that also takes a
/// message by reference.
pub trait FrameWrite: Sink<Outbound, Error = io::Error> + Send {
    /// `start_send` of a message whose JSON is borrowed (after `poll_ready`,
    /// as for `start_send`). A sink that frames into a buffer of its own
    /// copies it straight there; the others get an owned item, as from
    /// `start_send`.
    fn start_send_json(self: Pin<&mut Self>, kind: Kind, json: &[u8]) -> io::Result<()> {
        self.start_send(Outbound::message(kind, Bytes::copy_from_slice(json)))
    }

    /// Bytes this sink holds that the transport has not taken yet, where it
    /// knows (0 where it does not). A large message is written a piece at a
    /// time as the peer reads: the write-stall rule counts this going down
    /// as progress, so a slow reader is never taken for one that stopped.
    fn unwritten(&self) -> usize {
        0
    }
}

/// A byte-stream framing that frames a message given by reference: what
/// [`Transport::framed`] needs of its codec. Its `Encoder` writes a message
/// the same way.
pub trait EncodeJson: Encoder<Outbound, Error = io::Error> {
    /// Appends `json`, framed, to `dst`. Framing a message needs no state of
    /// the codec's, so the writer's own buffer is framed into where it lies.
    fn encode_json(json: &[u8], dst: &mut BytesMut) -> io::Result<()>;
}

impl<W, C> FrameWrite for FramedWrite<W, C>
where
    W: AsyncWrite + Unpin + Send,
    C: EncodeJson + Send,
{
    fn start_send_json(self: Pin<&mut Self>, _: Kind, json: &[u8]) -> io::Result<()> {
        // In place: taking the buffer out and putting it back cost a
        // stalled reload of it per reply (4 % of a bridge's ping, perf).
        C::encode_json(json, self.get_mut().write_buffer_mut())
    }

    fn unwritten(&self) -> usize {
        self.write_buffer().len()
    }
}

impl<T, F, R> FrameWrite for futures_util::sink::Unfold<T, F, R> where Self: Sink<Outbound, Error = io::Error> + Send {}

/// Both directions of one connection, framing applied.
pub struct Transport {
    pub reader: FrameStream,
    pub writer: FrameSink,
    /// Whether the peer should send pings (WebSocket) to detect a dead other side.
    pub wants_keepalive: bool,
}

impl Transport {
    /// Frames a reader and a writer with a tokio codec (NDJSON or Content-Length).
    pub fn framed<R, W, C>(reader: R, writer: W, codec: C) -> Self
    where
        R: AsyncRead + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
        C: Decoder<Item = Frame, Error = io::Error> + EncodeJson + Clone + Send + 'static,
    {
        Transport {
            reader: Box::pin(FramedRead::new(reader, codec.clone())),
            writer: Box::pin(FramedWrite::new(writer, codec)),
            wants_keepalive: false,
        }
    }

    /// NDJSON over the two halves of a byte stream (use `into_split` on TCP and
    /// Unix streams: it needs no lock between the halves). Its frames are
    /// [`Frame::Lines`], a read's worth at a time.
    pub fn ndjson<R, W>(reader: R, writer: W, max_line: usize) -> Self
    where
        R: AsyncRead + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Transport {
            reader: Box::pin(FramedRead::new(reader, NdjsonLines::new(max_line))),
            writer: Box::pin(FramedWrite::new(writer, NdjsonCodec::new(max_line))),
            wants_keepalive: false,
        }
    }

    /// Content-Length over a pair of pipes (a child's stdout and stdin, or our own stdio).
    pub fn content_length<R, W>(reader: R, writer: W, max_body: usize) -> Self
    where
        R: AsyncRead + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::framed(reader, writer, ContentLengthCodec::new(max_body))
    }

    /// A transport fed by channels, for framings that are not one byte stream
    /// (SSE downstream + HTTP POST upstream) and for tests.
    pub fn channels(inbound: mpsc::Receiver<Frame>, outbound: mpsc::Sender<Outbound>) -> Self {
        let reader = tokio_stream_from(inbound).map(Ok);
        let writer = futures_util::sink::unfold(outbound, |tx, item: Outbound| async move {
            tx.send(item).await.map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            Ok::<_, io::Error>(tx)
        });
        Transport { reader: Box::pin(reader), writer: Box::pin(writer), wants_keepalive: false }
    }
}

/// The least room a read into a framing's buffer gets (tokio-util's own
/// initial buffer size).
const READ_ROOM: usize = 8 * 1024;

/// Messages up to this long are copied out of the read buffer rather than
/// split off it.
const COPY_BELOW: usize = 1024;

/// Makes room for the next read once the messages taken from `buf` are gone.
/// The next read goes into the buffer's spare room, which messages split off
/// the front use up: with a few bytes left, a read takes a fraction of what
/// is waiting and another read (often one that finds nothing) follows. With
/// nothing else holding the buffer, making room moves nothing and allocates
/// nothing.
fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < READ_ROOM / 2 {
        buf.reserve(READ_ROOM);
    }
}

/// Takes a message of `len` bytes off the front of `buf` and consumes
/// `consumed` bytes (the message and its framing). A short message is copied
/// into its own allocation, which costs less than sharing the read buffer
/// (two atomic reference counts a message, and a buffer that cannot be reused
/// until every message is gone); a long one is split off without a copy.
fn take_message(buf: &mut BytesMut, len: usize, consumed: usize) -> Bytes {
    use bytes::Buf;
    if len <= COPY_BELOW {
        let message = Bytes::copy_from_slice(&buf[..len]);
        buf.advance(consumed);
        message
    } else {
        let mut message = buf.split_to(consumed);
        message.truncate(len);
        message.freeze()
    }
}

fn tokio_stream_from<T: Send + 'static>(rx: mpsc::Receiver<T>) -> impl Stream<Item = T> + Send {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

#[cfg(test)]
mod tests {
    use futures_util::SinkExt;

    use super::*;

    /// A message written by reference reaches the stream exactly as the
    /// same message handed over owned, in every byte-stream framing.
    #[tokio::test]
    async fn a_message_by_reference_is_framed_as_the_owned_one() {
        async fn both<C: EncodeJson + Clone + Send>(codec: C) -> (Vec<u8>, Vec<u8>) {
            let json: &[u8] = b"{\"a\":\r\n1,\"b\":\"\xc3\xa9\"}";
            let mut by_ref = FramedWrite::new(Vec::new(), codec.clone());
            std::future::poll_fn(|cx| Pin::new(&mut by_ref).poll_ready(cx)).await.unwrap();
            Pin::new(&mut by_ref).start_send_json(Kind::Response, json).unwrap();
            by_ref.flush().await.unwrap();
            let mut owned = FramedWrite::new(Vec::new(), codec);
            owned.send(Outbound::message(Kind::Response, json.to_vec())).await.unwrap();
            (by_ref.into_inner(), owned.into_inner())
        }
        let (by_ref, owned) = both(NdjsonCodec::new(1024)).await;
        assert_eq!(by_ref, owned);
        assert_eq!(by_ref, "{\"a\":  1,\"b\":\"é\"}\n".as_bytes());
        let (by_ref, owned) = both(ContentLengthCodec::new(1024)).await;
        assert_eq!(by_ref, owned);
        assert!(by_ref.starts_with(b"Content-Length: 18\r\n\r\n{"), "{:?}", String::from_utf8_lossy(&by_ref));
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// Feeds `input` to a decoder in the given chunk sizes and collects every frame,
    /// finishing with `decode_eof` like `FramedRead` does.
    pub fn decode_in_chunks<D>(mut decoder: D, input: &[u8], chunks: &[usize]) -> Vec<Frame>
    where
        D: Decoder<Item = Frame, Error = io::Error>,
    {
        let mut buf = bytes::BytesMut::new();
        let mut frames = Vec::new();
        let mut rest = input;
        let mut sizes = chunks.iter().copied().cycle();
        while !rest.is_empty() {
            let n = sizes.next().unwrap_or(rest.len()).clamp(1, rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                frames.push(frame);
            }
        }
        while let Some(frame) = decoder.decode_eof(&mut buf).unwrap() {
            frames.push(frame);
        }
        frames
    }

    /// A small deterministic generator for split points (no dependency needed).
    pub fn random_chunks(seed: u64, count: usize, max: usize) -> Vec<usize> {
        let mut x = seed | 1;
        (0..count)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % max as u64) as usize + 1
            })
            .collect()
    }
}
