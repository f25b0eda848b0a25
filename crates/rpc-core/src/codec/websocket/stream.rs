//! What both WebSocket transports share: tungstenite's settings, the reader
//! that turns its messages into frames, and the conversions between them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::{Stream, StreamExt};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::Frame as WsFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::codec::{Frame, Outbound};

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
/// A server that holds many idle connections does better with
/// [`server_transport`](super::server_transport).
pub fn config(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(2 * 1024)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

pub(super) fn to_message(item: Outbound) -> Message {
    match item {
        // A text frame made as a frame, not as `Message::Text`, whose
        // `Utf8Bytes` would check the UTF-8 again (4 % of a broker's `ping`).
        // What goes out is UTF-8 already: JSON that serde_json or
        // `message::write` wrote, or a text frame or body that was checked
        // when it came in.
        Outbound::Message { json, .. } => {
            debug_assert!(std::str::from_utf8(&json).is_ok(), "outgoing JSON is UTF-8");
            Message::Frame(WsFrame::message(json, OpCode::Data(OpData::Text), true))
        }
        Outbound::Ping => Message::Ping(Default::default()),
        Outbound::Close { code, reason } => {
            Message::Close(Some(CloseFrame { code: code.into(), reason: reason.into() }))
        }
    }
}

pub(super) fn to_io(e: WsError) -> io::Error {
    match e {
        WsError::Io(e) => e,
        WsError::ConnectionClosed | WsError::AlreadyClosed => io::ErrorKind::BrokenPipe.into(),
        other => io::Error::other(other),
    }
}

pub(super) struct Reader<R> {
    inner: R,
    done: bool,
}

impl<R> Reader<R> {
    pub(super) fn new(inner: R) -> Self {
        Reader { inner, done: false }
    }
}

impl<R: Stream<Item = Result<Message, WsError>> + Unpin> Stream for Reader<R> {
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
