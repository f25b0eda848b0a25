//! The server transport: tungstenite's protocol state driven directly with
//! the connection task's context, a whole plain text frame read in place, and
//! every message framed straight into the socket's write queue.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use futures_util::{Sink, Stream};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as WsFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketContext};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use super::on_demand::ReadOnDemand;
use super::stream::{Reader, config, to_io};
use crate::codec::{FrameWrite, Outbound, Transport};
use crate::message::Kind;

/// tungstenite's read buffer on a [`ReadOnDemand`] socket. tungstenite keeps
/// this buffer for the connection's life and never reads more than its size
/// in one call; under [`ReadOnDemand`] such a call is a copy out of memory,
/// not a system call, and it gets one frame at most, so it can be small (and
/// it only reads the frames that are not taken in place). A frame larger than
/// this still grows tungstenite's buffer to the frame's size, as with
/// [`config`].
const ON_DEMAND_READ_BUFFER: usize = 256;

/// The server side of an upgraded connection (the handshake done), for a
/// daemon that holds many mostly idle ones: the socket is read through a
/// [`ReadOnDemand`] buffer, which exists only while input is waiting to be
/// taken, and tungstenite's own buffer is 256 bytes. An idle connection holds
/// about 2 KiB less than with [`config`]; a busy one reads 8 KiB a system call
/// instead of 2 KiB.
///
/// tungstenite's protocol state is driven directly, with the connection
/// task's own context (`Direct`, below), rather than through tokio-tungstenite's
/// `WebSocketStream` split in two: that layer (waker proxies registered on
/// every read, a `BiLock` per half) was a fifth of a broker's CPU per ping.
/// A whole plain text frame is taken from the input as it is
/// (`DirectState::whole_text`), and every message is framed straight into
/// the socket's write queue: together, 27 % of a broker's `ping`.
pub fn server_transport<S>(io: S, max_message: usize) -> Transport
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let direct = Direct::new(io, max_message);
    Transport { reader: Box::pin(Reader::new(direct.clone())), writer: Box::pin(direct), wants_keepalive: true }
}

/// How much a server transport queues before it writes: what tungstenite
/// buffers by default (`WebSocketConfig::write_buffer_size`).
const WRITE_BUFFER: usize = 128 * 1024;

/// A WebSocket's protocol state and its socket, shared by the transport's two
/// halves, which the connection's one task polls: each call passes that
/// task's context to the socket itself. A read that has to answer a ping
/// writes too, and registers the same task for the socket's write readiness
/// as the writer would, so no wake-up is lost between the halves. (Halves
/// polled by two tasks could each take the other's registration: nothing in
/// rpc-core does that; tokio-tungstenite's proxies are for that case.)
pub(super) struct Direct<S> {
    pub(super) shared: Arc<Shared<S>>,
}

pub(super) struct Shared<S> {
    pub(super) state: Mutex<DirectState<S>>,
    /// What tokio-tungstenite's sink calls `ready`: the last write did not
    /// block, so the next may be started without flushing first. Outside the
    /// lock: the writer asks before every message, and it is nearly always
    /// yes (a lock taken and released is two atomic exchanges).
    ready: AtomicBool,
}

/// The socket and tungstenite's state for it. What ended (the read side,
/// the close handshake) is tungstenite's own state: once the read side has
/// ended, [`Reader`] polls it no more, and `close` queues the close frame
/// once and only flushes after that.
pub(super) struct DirectState<S> {
    pub(super) io: ReadOnDemand<S>,
    ws: WebSocketContext,
    /// Whether tungstenite may be in the middle of something that the next
    /// frame belongs to: a fragmented message, a pong or a close it owes
    /// (sent at its next read). Set when a read of its returned a control
    /// frame or nothing yet; cleared when one returned a whole data message,
    /// which leaves it with no fragment and nothing owed that a read sends.
    tungstenite_busy: bool,
}

impl<S> Clone for Direct<S> {
    fn clone(&self) -> Self {
        Direct { shared: self.shared.clone() }
    }
}

impl<S> Direct<S> {
    pub(super) fn new(io: S, max_message: usize) -> Self {
        let config = config(max_message).read_buffer_size(ON_DEMAND_READ_BUFFER);
        let ws = WebSocketContext::new(Role::Server, Some(config));
        let io = ReadOnDemand::new(io);
        let state = Mutex::new(DirectState { io, ws, tungstenite_busy: false });
        Direct { shared: Arc::new(Shared { state, ready: AtomicBool::new(true) }) }
    }
}

/// The socket as tungstenite's blocking `Read + Write`, for one poll: an
/// operation that would wait is `WouldBlock`, with `cx` registered to wake.
struct Polled<'a, 'b, S> {
    io: &'a mut S,
    cx: &'a mut Context<'b>,
}

impl<S: AsyncRead + Unpin> io::Read for Polled<'_, '_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.cx, &mut buf) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncWrite + Unpin> io::Write for Polled<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.io).poll_flush(self.cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> DirectState<S> {
    /// The next message: a whole text frame at the front of the input taken
    /// as it is, anything else read by tungstenite.
    pub(super) fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<Message, WsError>> {
        if let Some(text) = self.whole_text() {
            return Poll::Ready(Ok(Message::Text(text)));
        }
        let read = self.poll(cx, |ws, io| ws.read(io));
        self.tungstenite_busy = !matches!(read, Poll::Ready(Ok(Message::Text(_) | Message::Binary(_))));
        read
    }

    /// The message of the frame at the front of the input, taken without
    /// tungstenite when that is exactly what tungstenite would make of it:
    /// tungstenite is between messages and owes nothing, and the frame is
    /// whole, in the plain shape of [`plain_text_header`], within the limit,
    /// and its payload is UTF-8. Nearly every frame a JSON-RPC client sends
    /// is; reading it through tungstenite cost a quarter of a broker's
    /// `ping`. Anything else is left to tungstenite, untouched. (The
    /// `websocket` fuzz target checks that both ways read the same.)
    pub(super) fn whole_text(&mut self) -> Option<Utf8Bytes> {
        if self.tungstenite_busy || !self.ws.can_read() {
            return None;
        }
        let input = self.io.unread();
        let (mask, start, end) = plain_text_header(input)?;
        // The limit tungstenite holds a message to (and so a frame).
        if self.ws.get_config().max_message_size.is_some_and(|max| end - start > max) {
            return None;
        }
        let text = unmasked_text(input.get(start..end)?, mask)?;
        self.io.take_frame(end);
        Some(text.into())
    }

    /// Queues `json` as a text frame, and writes the queue out once it is
    /// [`WRITE_BUFFER`] bytes or more (`Pending` if that blocks). Once a
    /// close has been sent or received, tungstenite says why nothing more
    /// may be, as before.
    fn poll_send_text(&mut self, cx: &mut Context<'_>, json: &[u8]) -> Poll<Result<(), WsError>> {
        if !self.ws.can_write() {
            let frame = WsFrame::message(Bytes::copy_from_slice(json), OpCode::Data(OpData::Text), true);
            return self.poll(cx, |ws, io| ws.write(io, Message::Frame(frame)));
        }
        self.io.queue_text(json);
        if self.io.queued() < WRITE_BUFFER {
            return Poll::Ready(Ok(()));
        }
        self.io.poll_write_queued(cx).map_err(WsError::Io)
    }

    /// Runs one tungstenite operation on the socket; `WouldBlock` is `Pending`.
    fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(&mut WebSocketContext, &mut Polled<'_, '_, ReadOnDemand<S>>) -> Result<T, WsError>,
    ) -> Poll<Result<T, WsError>> {
        match op(&mut self.ws, &mut Polled { io: &mut self.io, cx }) {
            Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            other => Poll::Ready(other),
        }
    }
}

/// The read half: tokio-tungstenite's `Stream` for `WebSocketStream`.
impl<S: AsyncRead + AsyncWrite + Unpin> Stream for Direct<S> {
    type Item = Result<Message, WsError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match ready!(self.shared.state.lock().poll_read(cx)) {
            Ok(message) => Poll::Ready(Some(Ok(message))),
            Err(WsError::AlreadyClosed | WsError::ConnectionClosed) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }
}

/// The write half. A message is framed straight into the socket's queue
/// (`ReadOnDemand::queue_text`), borrowed or owned, without tungstenite: what
/// it did for a text frame (a `Message`, its frame, its buffer) was a sixth
/// of a broker's `ping`. Pings and the close go through tungstenite, which
/// writes behind what is queued (and answers pings and closes by itself).
impl<S: AsyncRead + AsyncWrite + Unpin> Sink<Outbound> for Direct<S> {
    type Error = io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.shared.ready.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        // The last write blocked: flush it away first.
        self.write_out(cx).map_err(to_io)
    }

    fn start_send(self: Pin<&mut Self>, item: Outbound) -> io::Result<()> {
        match item {
            Outbound::Message { json, .. } => self.send_text(&json),
            Outbound::Close { code, reason } => {
                self.send_close(CloseFrame { code: code.into(), reason: reason.into() })
            }
            Outbound::Ping => self.send_message(Message::Ping(Default::default())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(self.write_out(cx)) {
            // The close handshake just completed: flushed, not an error.
            Err(WsError::ConnectionClosed) => Poll::Ready(Ok(())),
            other => Poll::Ready(other.map_err(to_io)),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.ready.store(true, Ordering::Release);
        // Queues the close frame the first time, then only flushes.
        match ready!(self.shared.state.lock().poll(cx, |ws, io| ws.close(io, None))) {
            Ok(()) | Err(WsError::ConnectionClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(to_io(e))),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> FrameWrite for Direct<S> {
    fn start_send_json(self: Pin<&mut Self>, _: Kind, json: &[u8]) -> io::Result<()> {
        self.send_text(json)
    }

    fn unwritten(&self) -> usize {
        self.shared.state.lock().io.queued()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Direct<S> {
    /// Queues a text message. No context here: a write that would block is
    /// left queued, and the `poll_ready` or `poll_flush` that must follow
    /// registers the task with the socket (the no-op waker's registration
    /// is replaced).
    fn send_text(&self, json: &[u8]) -> io::Result<()> {
        debug_assert!(std::str::from_utf8(json).is_ok(), "outgoing JSON is UTF-8");
        let mut cx = Context::from_waker(Waker::noop());
        let written = self.shared.state.lock().poll_send_text(&mut cx, json);
        self.after_send(written)
    }

    /// Closes with `frame`, or, when the other side closed first, sends the
    /// answer tungstenite queued to its close (echoing its code, as RFC 6455
    /// §5.5.1 asks) instead: `write` would refuse any message then, the
    /// answer included, and the connection went away without one.
    fn send_close(&self, frame: CloseFrame) -> io::Result<()> {
        let mut cx = Context::from_waker(Waker::noop());
        let written = match self.shared.state.lock().poll(&mut cx, |ws, io| ws.close(io, Some(frame))) {
            // Answered, and the handshake is over.
            Poll::Ready(Err(WsError::ConnectionClosed)) => Poll::Ready(Ok(())),
            other => other,
        };
        self.after_send(written)
    }

    /// Hands a ping to tungstenite, as [`send_text`](Self::send_text) does a message.
    fn send_message(&self, message: Message) -> io::Result<()> {
        let mut cx = Context::from_waker(Waker::noop());
        let written = self.shared.state.lock().poll(&mut cx, |ws, io| ws.write(io, message));
        self.after_send(written)
    }

    fn after_send(&self, written: Poll<Result<(), WsError>>) -> io::Result<()> {
        // Blocked: queued, and the next `poll_ready` flushes first.
        self.shared.ready.store(!written.is_pending(), Ordering::Release);
        match written {
            Poll::Ready(Err(e)) => Err(to_io(e)),
            Poll::Ready(Ok(())) | Poll::Pending => Ok(()),
        }
    }

    /// Writes out what is queued, then what tungstenite holds; the writer
    /// may start the next message once this is done, whatever it gave.
    fn write_out(&self, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        let flushed = ready!(self.shared.state.lock().poll(cx, |ws, io| ws.flush(io)));
        self.shared.ready.store(true, Ordering::Release);
        Poll::Ready(flushed)
    }
}

/// A client's payload with its mask taken off (RFC 6455 §5.3): copied, then
/// unmasked in place eight bytes at a time.
#[cfg(test)]
pub(super) fn unmasked(payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    unmask(payload, mask).0
}

/// A client's text payload with its mask taken off, as the text it must be:
/// `None` when it is not UTF-8. Unmasking reads every byte anyway, so it
/// notes whether all are ASCII, and then the text needs no check of its own:
/// for a short message the check cost more than the unmasking.
#[allow(unsafe_code)]
pub(super) fn unmasked_text(payload: &[u8], mask: [u8; 4]) -> Option<String> {
    let (bytes, any_high_bit) = unmask(payload, mask);
    if !any_high_bit {
        // SAFETY: no byte has its high bit set (`unmask` ORs every byte it
        // writes): all are ASCII, and ASCII bytes are valid UTF-8.
        return Some(unsafe { String::from_utf8_unchecked(bytes) });
    }
    String::from_utf8(bytes).ok()
}

/// The payload unmasked, and whether any of its bytes has the high bit set.
fn unmask(payload: &[u8], mask: [u8; 4]) -> (Vec<u8>, bool) {
    let mut out = payload.to_vec();
    let [a, b, c, d] = mask;
    let word = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut all = 0u64;
    let mut words = out.chunks_exact_mut(8);
    for eight in &mut words {
        let unmasked = u64::from_ne_bytes((&*eight).try_into().expect("chunks of eight")) ^ word;
        eight.copy_from_slice(&unmasked.to_ne_bytes());
        all |= unmasked;
    }
    let mut rest = 0u8;
    for (byte, mask) in words.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= mask;
        rest |= *byte;
    }
    let high_bits = all.to_ne_bytes().iter().fold(rest, |acc, byte| acc | byte) & 0x80;
    (out, high_bits != 0)
}

/// The header of a frame in the shape nearly every client's message has, at
/// the front of `input`: final, text, no reserved bits, masked, with a
/// payload under 64 KiB. Its mask, and where its payload starts and ends.
/// `None` for any other header (tungstenite reads those), or one not all
/// there yet.
fn plain_text_header(input: &[u8]) -> Option<([u8; 4], usize, usize)> {
    const FINAL_TEXT: u8 = 0x81;
    const MASKED: u8 = 0x80;
    let [FINAL_TEXT, second, rest @ ..] = input else { return None };
    if second & MASKED == 0 {
        return None;
    }
    let (len, rest) = match second & !MASKED {
        126 => {
            let [high, low, rest @ ..] = rest else { return None };
            (usize::from(u16::from_be_bytes([*high, *low])), rest)
        }
        127 => return None,
        len => (usize::from(len), rest),
    };
    let (mask, _) = rest.split_first_chunk::<4>()?;
    let start = input.len() - rest.len() + 4;
    Some((*mask, start, start + len))
}
