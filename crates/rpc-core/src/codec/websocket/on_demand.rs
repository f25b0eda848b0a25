//! A server socket's reads through a buffer that exists only while input
//! waits, handed over a frame at a time, and its writes behind a queue.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};

/// How much one system call reads into a [`ReadOnDemand`] buffer: a window of
/// 64 pipelined pings in one read.
const READ_CHUNK: usize = 8 * 1024;

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
    /// Frames to write, in order, from `written` on: every write goes out
    /// behind them. What a partial write took is only skipped, and moved out
    /// once it is most of the buffer: taking it off the front at each write
    /// moved the rest every time, gigabytes for a 64 MiB message written to
    /// a slow reader in socket-sized pieces.
    out: Vec<u8>,
    written: usize,
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
    pub(super) fn unread(&self) -> &[u8] {
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
        ReadOnDemand { io, chunk: None, frame_left: 0, out: Vec::new(), written: 0 }
    }

    /// The socket (for tests).
    #[cfg(test)]
    pub(super) fn socket(&self) -> &S {
        &self.io
    }

    /// Bytes queued to write and not written yet.
    pub(super) fn queued(&self) -> usize {
        self.out.len() - self.written
    }

    /// Whether a read buffer is held (input read from the socket and not yet taken).
    pub fn holds_buffer(&self) -> bool {
        self.chunk.is_some()
    }

    /// What was read from the socket and not yet taken: between frames, it
    /// starts with a frame.
    pub(super) fn unread(&self) -> &[u8] {
        self.chunk.as_ref().map_or(&[], |chunk| chunk.unread())
    }

    /// Takes `len` bytes of [`unread`](Self::unread), a whole frame.
    pub(super) fn take_frame(&mut self, len: usize) {
        debug_assert_eq!(self.frame_left, 0, "a frame taken while another is being read");
        if let Some(chunk) = &mut self.chunk {
            chunk.start += len.min(chunk.end - chunk.start);
        }
    }
}

impl<S: AsyncWrite + Unpin> ReadOnDemand<S> {
    /// Frames `json` as a text message behind what is queued (a server's
    /// frames are not masked).
    pub(super) fn queue_text(&mut self, json: &[u8]) {
        let header = FrameHeader { opcode: OpCode::Data(OpData::Text), ..FrameHeader::default() };
        header.format(json.len() as u64, &mut self.out).expect("a Vec takes every write");
        self.out.extend_from_slice(json);
    }

    /// Writes out what is queued.
    pub(super) fn poll_write_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.out.len() {
            let written = match Pin::new(&mut self.io).poll_write(cx, &self.out[self.written..]) {
                Poll::Ready(written) => written?,
                Poll::Pending => {
                    // Most of the buffer is written: the rest moves to the
                    // front, once, and new frames go behind it.
                    if self.written > self.out.len() / 2 {
                        self.out.drain(..self.written);
                        self.written = 0;
                    }
                    return Poll::Pending;
                }
            };
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += written;
        }
        self.out.clear();
        self.written = 0;
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
