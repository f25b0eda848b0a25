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
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::stream::SplitStream;
use futures_util::{SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
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
pub fn config(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(2 * 1024)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

/// Wraps an established WebSocket as a transport.
pub fn transport<S>(ws: WebSocketStream<S>) -> Transport
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    let writer = sink.with(|item: Outbound| async move { Ok::<_, WsError>(to_message(item)) });
    Transport {
        reader: Box::pin(Reader { inner: stream, done: false }),
        writer: Box::pin(writer.sink_map_err(to_io)),
        wants_keepalive: true,
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
                Some(Ok(Message::Text(text))) => Some(Ok(Frame::Message(text.into()))),
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
            if !matches!(frame, Some(Ok(Frame::Message(_) | Frame::Alive))) {
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
    use tokio_tungstenite::tungstenite::protocol::Role;

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
        assert_eq!(t.reader.next().await.unwrap().unwrap(), Frame::Message(r#"{"a":1}"#.into()));
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
    async fn close_carries_the_code() {
        let (mut t, mut client) = pair().await;
        t.writer.send(Outbound::Close { code: 4001, reason: "replaced".into() }).await.unwrap();
        let Message::Close(Some(frame)) = client.next().await.unwrap().unwrap() else { panic!() };
        assert_eq!(u16::from(frame.code), 4001);
        assert_eq!(frame.reason.as_str(), "replaced");
    }
}
