//! WebSocket text frames: one JSON-RPC message or batch per text frame.
//!
//! An adapter over tokio-tungstenite, which does the protocol: the handshake,
//! control frames, fragments, the close handshake and every check. A server
//! transport ([`server_transport`]) takes the one common case off it: a whole,
//! plain text frame is read and written in place, where that is exactly what
//! tungstenite would do (the `websocket` fuzz target checks the read side
//! against tokio-tungstenite's stream). Choices the spec leaves to us:
//! - a binary frame closes the connection with 1003 (unsupported data): there is
//!   no id to answer to and a peer sending binary is speaking another protocol;
//! - a frame over the size limit closes with 1009 (message too big), since
//!   tungstenite cannot resume a stream after refusing a frame;
//! - pings from the other side are answered by tungstenite itself; our own
//!   pings (sent by the peer's keepalive) and any pong count as signs of life.

mod on_demand;
mod server;
mod stream;
#[cfg(test)]
mod tests;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::{Sink, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

pub use on_demand::ReadOnDemand;
pub use server::server_transport;
pub use stream::{DEFAULT_MAX_MESSAGE, config};
use stream::{Reader, to_io, to_message};

use super::{FrameWrite, Outbound, Transport};

/// Wraps an established WebSocket (a client's, or a server's that
/// tokio-tungstenite accepted) as a transport.
pub fn transport<S>(ws: WebSocketStream<S>) -> Transport
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    Transport {
        reader: Box::pin(Reader::new(stream)),
        writer: Box::pin(Writer { inner: sink, closing: false }),
        wants_keepalive: true,
    }
}

/// The write half: each item becomes its message as it is handed over (not
/// through `SinkExt::with`, which makes and polls a future per item).
struct Writer<W> {
    inner: W,
    /// A close was handed over.
    closing: bool,
}

impl<W: Sink<Message, Error = WsError> + Unpin> Sink<Outbound> for Writer<W> {
    type Error = io::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_ready_unpin(cx).map_err(to_io)
    }

    fn start_send(mut self: Pin<&mut Self>, item: Outbound) -> io::Result<()> {
        self.closing |= matches!(item, Outbound::Close { .. });
        let closing = self.closing;
        match self.inner.start_send_unpin(to_message(item)) {
            Err(WsError::Protocol(ProtocolError::SendAfterClosing)) if closing => Ok(()),
            other => other.map_err(to_io),
        }
    }

    /// When the other side closed first, tungstenite refuses our close (here
    /// or, through `SplitSink`, at this flush) and has queued its answer to
    /// theirs (RFC 6455 §5.5.1): the flush goes on, and sends that answer.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut refused = false;
        loop {
            match ready!(self.inner.poll_flush_unpin(cx)) {
                Err(WsError::Protocol(ProtocolError::SendAfterClosing)) if self.closing && !refused => refused = true,
                // The answer went out, and the handshake is over.
                Err(WsError::ConnectionClosed) if self.closing => return Poll::Ready(Ok(())),
                other => return Poll::Ready(other.map_err(to_io)),
            }
        }
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_close_unpin(cx).map_err(to_io)
    }
}

/// tungstenite takes each message as an owned value: the borrowed JSON is
/// copied into one, as `FrameWrite` does by default. (Copied into a buffer
/// the writer keeps and split off it instead, it saved 1 % of a `ping`: the
/// split and the reclaim cost what the allocation did.)
impl<W: Sink<Message, Error = WsError> + Unpin + Send> FrameWrite for Writer<W> {}
