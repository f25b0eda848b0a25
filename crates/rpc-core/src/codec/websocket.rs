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

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{Frame as WsFrame, FrameHeader};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig, WebSocketContext};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use super::{Frame, FrameWrite, Outbound, Transport};
use crate::message::Kind;

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
/// A server that holds many idle connections does better with [`server_transport`].
pub fn config(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(2 * 1024)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

/// tungstenite's read buffer on a [`ReadOnDemand`] socket. tungstenite keeps
/// this buffer for the connection's life and never reads more than its size
/// in one call; under [`ReadOnDemand`] such a call is a copy out of memory,
/// not a system call, and it gets one frame at most, so it can be small (and
/// it only reads the frames that are not taken in place). A frame larger than
/// this still grows tungstenite's buffer to the frame's size, as with
/// [`config`].
const ON_DEMAND_READ_BUFFER: usize = 256;

/// How much one system call reads into a [`ReadOnDemand`] buffer: a window of
/// 64 pipelined pings in one read.
const READ_CHUNK: usize = 8 * 1024;

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
    Transport {
        reader: Box::pin(Reader { inner: direct.clone(), done: false }),
        writer: Box::pin(direct),
        wants_keepalive: true,
    }
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
struct Direct<S> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    state: Mutex<DirectState<S>>,
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
struct DirectState<S> {
    io: ReadOnDemand<S>,
    ws: WebSocketContext,
    /// The limit on a message (and so on a frame).
    max_message: usize,
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
    fn new(io: S, max_message: usize) -> Self {
        let config = config(max_message).read_buffer_size(ON_DEMAND_READ_BUFFER);
        let ws = WebSocketContext::new(Role::Server, Some(config));
        let io = ReadOnDemand::new(io);
        let state = Mutex::new(DirectState { io, ws, max_message, tungstenite_busy: false });
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
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<Message, WsError>> {
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
    fn whole_text(&mut self) -> Option<Utf8Bytes> {
        if self.tungstenite_busy || !self.ws.can_read() {
            return None;
        }
        let input = self.io.unread();
        let (mask, start, end) = plain_text_header(input)?;
        if end - start > self.max_message {
            return None;
        }
        let text = String::from_utf8(unmasked(input.get(start..end)?, mask)).ok()?;
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
        if self.io.out.len() < WRITE_BUFFER {
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
fn unmasked(payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut out = payload.to_vec();
    let [a, b, c, d] = mask;
    let word = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut words = out.chunks_exact_mut(8);
    for eight in &mut words {
        let unmasked = u64::from_ne_bytes((&*eight).try_into().expect("chunks of eight")) ^ word;
        eight.copy_from_slice(&unmasked.to_ne_bytes());
    }
    for (byte, mask) in words.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= mask;
    }
    out
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

/// A socket whose reads go through a buffer that is allocated when the socket
/// has input and freed when it has none left (its read would block): an idle
/// connection holds no read buffer at all. Writes go straight through.
///
/// The input is a client's WebSocket frames, and a read never goes past the
/// end of the frame it starts in: tungstenite, reading through it, holds at
/// most one frame, so whatever it has not read yet starts with a frame of
/// its own, which the server transport may take whole (`DirectState::whole_text`).
pub struct ReadOnDemand<S> {
    io: S,
    /// What the last system call read and the reader has not taken yet.
    chunk: Option<Box<Chunk>>,
    /// How much of the frame being read is still to be handed over; 0
    /// between frames.
    frame_left: u64,
    /// Frames to write, in order: every write goes out behind them.
    out: Vec<u8>,
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

    /// What was read and not yet taken.
    #[allow(unsafe_code)]
    fn unread(&self) -> &[u8] {
        let part = &self.data[self.start..self.end];
        // SAFETY: `end` is only ever set to the length a read filled
        // (`ReadBuf::filled`, which is initialised by its contract), or
        // moved down with the bytes below it (`keep_unread_only`), and
        // `start <= end`, so every byte of `part` was written by a read.
        // `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { &*(part as *const [MaybeUninit<u8>] as *const [u8]) }
    }

    /// Moves what is unread to the front, to read more behind it.
    fn keep_unread_only(&mut self) {
        self.data.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
    }
}

const CHUNK_DATA: usize = READ_CHUNK - 2 * std::mem::size_of::<usize>();

/// Where a frame starting at the front of `input` ends, if its header is
/// all there; a header tungstenite refuses ends nowhere (everything after it
/// may be handed over: tungstenite fails on it first).
enum FrameEnd {
    At(u64),
    Unknown,
    Refused,
}

fn frame_end(input: &[u8]) -> FrameEnd {
    let mut cursor = io::Cursor::new(input);
    match FrameHeader::parse(&mut cursor) {
        Ok(Some((_, payload))) => FrameEnd::At(cursor.position().saturating_add(payload)),
        Ok(None) => FrameEnd::Unknown,
        Err(_) => FrameEnd::Refused,
    }
}

impl<S> ReadOnDemand<S> {
    pub fn new(io: S) -> Self {
        ReadOnDemand { io, chunk: None, frame_left: 0, out: Vec::new() }
    }

    /// Whether a read buffer is held (input read from the socket and not yet taken).
    pub fn holds_buffer(&self) -> bool {
        self.chunk.is_some()
    }

    /// What was read from the socket and not yet taken: between frames, it
    /// starts with a frame.
    fn unread(&self) -> &[u8] {
        self.chunk.as_ref().map_or(&[], |chunk| chunk.unread())
    }

    /// Takes `len` bytes of [`unread`](Self::unread), a whole frame.
    fn take_frame(&mut self, len: usize) {
        debug_assert_eq!(self.frame_left, 0, "a frame taken while another is being read");
        if let Some(chunk) = &mut self.chunk {
            chunk.start += len.min(chunk.end - chunk.start);
        }
    }
}

impl<S: AsyncWrite + Unpin> ReadOnDemand<S> {
    /// Frames `json` as a text message behind what is queued (a server's
    /// frames are not masked).
    fn queue_text(&mut self, json: &[u8]) {
        let header = FrameHeader { opcode: OpCode::Data(OpData::Text), ..FrameHeader::default() };
        header.format(json.len() as u64, &mut self.out).expect("a Vec takes every write");
        self.out.extend_from_slice(json);
    }

    /// Writes out what is queued.
    fn poll_write_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let written = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..written);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> ReadOnDemand<S> {
    /// Reads from the socket into the chunk, behind what is unread. `false`
    /// at the end of the input; nothing read and no chunk held otherwise.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let chunk = self.chunk.get_or_insert_with(Chunk::new);
        chunk.keep_unread_only();
        let mut buf = ReadBuf::uninit(&mut chunk.data[chunk.end..]);
        let read = Pin::new(&mut self.io).poll_read(cx, &mut buf);
        let filled = buf.filled().len();
        chunk.end += filled;
        if chunk.start == chunk.end {
            // Nothing held (it would block, the input ended or failed):
            // give the buffer back, and the write queue's if it is empty.
            self.chunk = None;
            if self.out.is_empty() {
                self.out = Vec::new();
            }
        }
        read.map(|read| read.map(|()| filled > 0))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadOnDemand<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let unread = this.unread();
            if this.frame_left == 0 && !unread.is_empty() {
                match frame_end(unread) {
                    FrameEnd::At(end) => this.frame_left = end,
                    FrameEnd::Refused => this.frame_left = u64::MAX,
                    // The rest of the header is still to come: read it in
                    // behind what is here, then look again.
                    FrameEnd::Unknown => match ready!(this.fill(cx)) {
                        Ok(true) => continue,
                        // The input ended inside a header: hand over what
                        // there is, and the end after it.
                        Ok(false) => this.frame_left = u64::MAX,
                        Err(e) => return Poll::Ready(Err(e)),
                    },
                }
            }
            if !this.unread().is_empty() {
                break;
            }
            // Nothing held. A read as large as the buffer would gain nothing
            // from it, if it cannot go past the frame's end.
            if out.remaining() >= READ_CHUNK && this.frame_left >= out.remaining() as u64 {
                this.chunk = None;
                let before = out.filled().len();
                ready!(Pin::new(&mut this.io).poll_read(cx, out))?;
                this.frame_left -= (out.filled().len() - before) as u64;
                return Poll::Ready(Ok(()));
            }
            match ready!(this.fill(cx)) {
                Ok(true) => {}
                // The end of the input, or a failure: nothing held.
                Ok(false) => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let chunk = this.chunk.as_mut().expect("input is held");
        let give =
            chunk.unread().len().min(out.remaining()).min(usize::try_from(this.frame_left).unwrap_or(usize::MAX));
        out.put_slice(&chunk.unread()[..give]);
        chunk.start += give;
        this.frame_left -= give as u64;
        Poll::Ready(Ok(()))
    }
}

/// Writes go out behind what is queued.
impl<S: AsyncWrite + Unpin> AsyncWrite for ReadOnDemand<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_write_queued(cx))?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_write_queued(cx))?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_queued(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_queued(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Wraps an established WebSocket (a client's, or a server's that
/// tokio-tungstenite accepted) as a transport.
pub fn transport<S>(ws: WebSocketStream<S>) -> Transport
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    Transport {
        reader: Box::pin(Reader { inner: stream, done: false }),
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

fn to_message(item: Outbound) -> Message {
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

fn to_io(e: WsError) -> io::Error {
    match e {
        WsError::Io(e) => e,
        WsError::ConnectionClosed | WsError::AlreadyClosed => io::ErrorKind::BrokenPipe.into(),
        other => io::Error::other(other),
    }
}

struct Reader<R> {
    inner: R,
    done: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Kind;
    use futures_util::SinkExt;
    use tokio::io::DuplexStream;

    type Client = WebSocketStream<DuplexStream>;

    /// A server transport of each kind (driven directly, and through
    /// tokio-tungstenite) with a client on the other end of a pipe of
    /// `pipe` bytes each way.
    async fn pairs(max_message: usize, pipe: usize) -> [(&'static str, Transport, Client); 2] {
        let (a, b) = tokio::io::duplex(pipe);
        let direct = server_transport(a, max_message);
        let direct_client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        let (a, b) = tokio::io::duplex(pipe);
        let split = WebSocketStream::from_raw_socket(a, Role::Server, Some(config(max_message))).await;
        let split_client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        [("direct", direct, direct_client), ("tokio-tungstenite", transport(split), split_client)]
    }

    #[tokio::test]
    async fn text_frames_are_messages_and_replies_are_text() {
        for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
            client.send(Message::text(r#"{"a":1}"#)).await.unwrap();
            assert_eq!(t.reader.next().await.unwrap().unwrap(), Frame::Text(r#"{"a":1}"#.into()), "{kind}");
            t.writer.send(Outbound::message(Kind::Response, r#"{"b":2}"#)).await.unwrap();
            assert_eq!(client.next().await.unwrap().unwrap(), Message::text(r#"{"b":2}"#), "{kind}");
        }
    }

    #[tokio::test]
    async fn binary_frames_are_unsupported_with_1003() {
        for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
            client.send(Message::binary(vec![1, 2, 3])).await.unwrap();
            let frame = t.reader.next().await.unwrap().unwrap();
            assert!(matches!(frame, Frame::Unsupported { close_code: 1003, .. }), "{kind}: {frame:?}");
            assert!(t.reader.next().await.is_none(), "{kind}");
        }
    }

    #[tokio::test]
    async fn oversized_messages_are_unsupported_with_1009() {
        for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
            client.send(Message::text("x".repeat(4096))).await.unwrap();
            let frame = t.reader.next().await.unwrap().unwrap();
            assert!(matches!(frame, Frame::Unsupported { close_code: 1009, .. }), "{kind}: {frame:?}");
        }
    }

    #[tokio::test]
    async fn invalid_utf8_is_unsupported_with_1007() {
        for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
            let frame = tokio_tungstenite::tungstenite::protocol::frame::Frame::message(
                vec![b'"', 0xff, b'"'],
                tokio_tungstenite::tungstenite::protocol::frame::coding::OpCode::Data(
                    tokio_tungstenite::tungstenite::protocol::frame::coding::Data::Text,
                ),
                true,
            );
            client.send(Message::Frame(frame)).await.unwrap();
            let frame = t.reader.next().await.unwrap().unwrap();
            assert!(matches!(frame, Frame::Unsupported { close_code: 1007, .. }), "{kind}: {frame:?}");
        }
    }

    #[tokio::test]
    async fn pings_are_answered_even_when_the_write_side_is_full() {
        // A pipe of 64 bytes: the pongs for 200 pings cannot be written while
        // the client is not reading, so answering blocks, and the reader must
        // be woken to go on when the client reads again. tungstenite answers
        // the latest ping it has read (RFC 6455 allows skipping older ones):
        // the pongs come in order and the last ping is answered.
        for (kind, t, client) in pairs(1024, 64).await {
            let (mut client_sink, mut client_stream) = client.split();
            let mut reader = t.reader;
            let server = tokio::spawn(async move {
                let (mut alive, mut texts) = (0, 0);
                while let Some(frame) = reader.next().await {
                    match frame {
                        Ok(Frame::Alive) => alive += 1,
                        Ok(Frame::Text(_)) => texts += 1,
                        other => panic!("{other:?}"),
                    }
                }
                (alive, texts)
            });
            let pinger = tokio::spawn(async move {
                for n in 0..200u32 {
                    client_sink.send(Message::Ping(n.to_be_bytes().to_vec().into())).await.unwrap();
                }
                client_sink.send(Message::text("done")).await.unwrap();
                client_sink
            });
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let mut last = None;
            while last != Some(199) {
                let message = tokio::time::timeout(std::time::Duration::from_secs(5), client_stream.next())
                    .await
                    .unwrap_or_else(|_| panic!("{kind}: the last pong was {last:?}"));
                let Message::Pong(payload) = message.unwrap().unwrap() else { panic!("{kind}: not a pong") };
                let n = u32::from_be_bytes(payload[..].try_into().unwrap());
                assert!(last.is_none_or(|last| n > last), "{kind}: pong {n} after {last:?}");
                last = Some(n);
            }
            let mut client = pinger.await.unwrap().reunite(client_stream).unwrap();
            client.close(None).await.unwrap();
            assert_eq!(server.await.unwrap(), (200, 1), "{kind}");
            drop(t.writer);
        }
    }

    #[tokio::test]
    async fn a_reply_larger_than_the_pipe_is_written_in_full() {
        for (kind, mut t, mut client) in pairs(1 << 20, 1024).await {
            let big = format!(r#"{{"b":"{}"}}"#, "y".repeat(300_000));
            let expected = big.clone();
            let reading = tokio::spawn(async move { client.next().await.unwrap().unwrap() });
            let limit = std::time::Duration::from_secs(5);
            let sent = tokio::time::timeout(limit, t.writer.send(Outbound::message(Kind::Response, big))).await;
            sent.unwrap_or_else(|_| panic!("{kind}: the writer was never woken")).unwrap();
            assert_eq!(tokio::time::timeout(limit, reading).await.unwrap().unwrap(), Message::text(expected), "{kind}");
        }
    }

    #[tokio::test]
    async fn a_close_from_the_client_ends_the_input_and_is_answered() {
        for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
            client.close(None).await.unwrap();
            assert!(t.reader.next().await.is_none(), "{kind}");
            // tungstenite queued the answering close; the writer flushes it.
            let _ = t.writer.close().await;
            let answer = tokio::time::timeout(std::time::Duration::from_secs(5), client.next()).await.unwrap();
            assert!(matches!(answer, Some(Ok(Message::Close(_)))), "{kind}: {answer:?}");
        }
    }

    #[tokio::test]
    async fn on_demand_reads_big_messages_and_holds_no_buffer_when_idle() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut server = Direct::new(a, 4 << 20);
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
        assert!(!server.shared.state.lock().io.holds_buffer());
        // ...and a later message is read as before.
        client.send(Message::text(r#"{"a":1}"#)).await.unwrap();
        assert_eq!(server.next().await.unwrap().unwrap(), Message::text(r#"{"a":1}"#));
        // Over the limit: refused from its header.
        tokio::spawn(async move { client.send(Message::text("x".repeat(5 << 20))).await });
        assert!(matches!(server.next().await.unwrap(), Err(WsError::Capacity(_))));
    }

    /// A client's frame as it is on the wire: masked, unless `mask` is `None`.
    fn client_frame(opcode: OpCode, fin: bool, rsv1: bool, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
        let header = FrameHeader { is_final: fin, rsv1, rsv2: false, rsv3: false, opcode, mask };
        let mut wire = Vec::new();
        header.format(payload.len() as u64, &mut wire).unwrap();
        match mask {
            Some(mask) => wire.extend(unmasked(payload, mask)),
            None => wire.extend_from_slice(payload),
        }
        wire
    }

    fn text(payload: &str) -> Vec<u8> {
        client_frame(OpCode::Data(OpData::Text), true, false, Some([1, 0x80, 0x33, 0xfe]), payload.as_bytes())
    }

    fn frame(opcode: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
        client_frame(opcode, fin, false, Some([9, 8, 7, 6]), payload)
    }

    #[test]
    fn unmasking_takes_the_mask_off_every_byte() {
        let mask = [0x12, 0x34, 0x56, 0x78];
        for len in 0..13 {
            let payload: Vec<u8> = (0..len as u8).collect();
            let expected: Vec<u8> = payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
            assert_eq!(unmasked(&payload, mask), expected, "{len} bytes");
        }
    }

    /// Whole text frames are taken from the input without tungstenite, and
    /// what is taken is exactly the frame.
    #[test]
    fn whole_text_frames_are_taken_as_they_are() {
        let input = [text(r#"{"a":1}"#), text("é"), text(&"x".repeat(200))].concat();
        let direct = Direct::new(std::io::Cursor::new(input), 1024);
        let mut state = direct.shared.state.lock();
        let mut cx = Context::from_waker(Waker::noop());
        // The first goes through tungstenite (nothing was read yet), which
        // is handed that frame and no more.
        assert_eq!(state.poll_read(&mut cx).map(Result::unwrap), Poll::Ready(Message::text(r#"{"a":1}"#)));
        let rest = state.io.unread().len();
        assert_eq!(rest, text("é").len() + text(&"x".repeat(200)).len());
        assert_eq!(state.whole_text(), Some("é".into()));
        assert_eq!(state.io.unread().len(), rest - text("é").len());
        assert_eq!(state.whole_text(), Some("x".repeat(200).into()));
        assert!(state.io.unread().is_empty());
    }

    /// Every kind of frame, alone and mixed with whole text frames, cut into
    /// reads of every size: the server transport reads what tokio-tungstenite
    /// does (the same check as the `websocket` fuzz target's).
    #[test]
    fn the_server_transport_reads_what_tungstenite_reads() {
        let (text_op, continue_op) = (OpCode::Data(OpData::Text), OpCode::Data(OpData::Continue));
        let ping = OpCode::Control(tokio_tungstenite::tungstenite::protocol::frame::coding::Control::Ping);
        let close = OpCode::Control(tokio_tungstenite::tungstenite::protocol::frame::coding::Control::Close);
        let binary = OpCode::Data(OpData::Binary);
        let inputs: Vec<Vec<u8>> = vec![
            [text("a"), text(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), frame(ping, true, b"p"), text("b")]
                .concat(),
            [
                text("a"),
                frame(text_op, false, b"ab"),
                frame(ping, true, b""),
                frame(continue_op, true, b"cd"),
                text("x"),
            ]
            .concat(),
            [text("a"), frame(text_op, false, b"ab"), text("not a continuation")].concat(),
            [text("a"), frame(text_op, false, b"ab"), frame(ping, true, b""), text("not a continuation")].concat(),
            [text("a"), frame(continue_op, true, b"no start"), text("b")].concat(),
            [text("a"), client_frame(text_op, true, false, None, b"unmasked")].concat(),
            [text("a"), client_frame(text_op, true, false, None, b"unmasked"), b"zzzz".to_vec()].concat(),
            [text("a"), client_frame(text_op, true, true, Some([1, 2, 3, 4]), b"rsv1")].concat(),
            [text("a"), frame(text_op, true, b"\"\xff\""), text("b")].concat(),
            [
                text("a"),
                frame(text_op, false, "é".as_bytes()[..1].as_ref()),
                frame(continue_op, true, &"é".as_bytes()[1..]),
            ]
            .concat(),
            [text("a"), text(&"x".repeat(300)), text("b")].concat(),
            [text("a"), text(&"y".repeat(250)), text(&"z".repeat(126))].concat(),
            [text("a"), frame(binary, true, b"bin"), text("b")].concat(),
            [text("a"), frame(OpCode::Data(OpData::Reserved(3)), true, b"r"), text("b")].concat(),
            [text("a"), frame(ping, true, &[b'p'; 126]), text("b")].concat(),
            [text("a"), frame(close, true, &[3, 232]), text("after the close")].concat(),
            [text("a"), text("b")[..5].to_vec()].concat(),
        ];
        for (n, input) in inputs.iter().enumerate() {
            for read_size in (1..=20).chain([63, 64, 4096]) {
                let frames = crate::fuzzing::websocket_both_ways(input, read_size);
                assert_eq!(frames.first(), Some(&Ok(Frame::Text("a".into()))), "input {n}, reads of {read_size}");
            }
        }
    }

    /// Messages of every length class (7, 16 and 64-bit), owned and
    /// borrowed, arrive whole and in order, and a close sent after them
    /// arrives after them.
    #[tokio::test]
    async fn replies_of_every_size_arrive_in_order_before_the_close() {
        let sizes = [0, 1, 125, 126, 65_535, 65_536, 200_000, 3];
        for (kind, t, mut client) in pairs(1 << 20, 4096).await {
            let mut writer = t.writer;
            let sending = tokio::spawn(async move {
                for (n, size) in sizes.into_iter().enumerate() {
                    let json = format!("\"{}\"", char::from(b'a' + n as u8).to_string().repeat(size));
                    if n % 2 == 0 {
                        writer.send(Outbound::message(Kind::Response, json)).await.unwrap();
                    } else {
                        std::future::poll_fn(|cx| writer.as_mut().poll_ready(cx)).await.unwrap();
                        writer.as_mut().start_send_json(Kind::Response, json.as_bytes()).unwrap();
                    }
                }
                writer.send(Outbound::Close { code: 4001, reason: "done".into() }).await.unwrap();
                writer
            });
            for (n, size) in sizes.into_iter().enumerate() {
                let expected = format!("\"{}\"", char::from(b'a' + n as u8).to_string().repeat(size));
                let message = tokio::time::timeout(std::time::Duration::from_secs(5), client.next()).await;
                assert_eq!(message.unwrap().unwrap().unwrap(), Message::text(expected), "{kind}: message {n}");
            }
            let Message::Close(Some(frame)) = client.next().await.unwrap().unwrap() else { panic!("{kind}: no close") };
            assert_eq!(u16::from(frame.code), 4001, "{kind}");
            drop(sending.await.unwrap());
        }
    }

    #[tokio::test]
    async fn close_carries_the_code() {
        for (kind, mut t, mut client) in pairs(1024, 1 << 16).await {
            t.writer.send(Outbound::Close { code: 4001, reason: "replaced".into() }).await.unwrap();
            let Message::Close(Some(frame)) = client.next().await.unwrap().unwrap() else { panic!("{kind}") };
            assert_eq!(u16::from(frame.code), 4001, "{kind}");
            assert_eq!(frame.reason.as_str(), "replaced", "{kind}");
        }
    }
}
