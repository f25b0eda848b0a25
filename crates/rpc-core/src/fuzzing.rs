//! Entry points for the fuzz targets in `fuzz/`, kept here so that a plain test
//! can run them too (see the tests below). Beyond "never panics", each asserts
//! what its layer promises:
//!
//! - a framing yields the same frames however the bytes are cut into reads,
//!   and no message over its limit;
//! - a WebSocket connection yields text messages under the limit and stops
//!   after anything it cannot carry on from;
//! - every reply to a parsed message is itself a valid message carrying the
//!   same id, and a request re-serialised reads back the same;
//! - the fast scanner for common messages reads what serde reads, and a
//!   message with an id is never taken for a notification.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_util::codec::Decoder;

use crate::codec::{self, ContentLengthCodec, Frame, Line, NdjsonCodec, NdjsonLines, Next};
use crate::message::{self, Id, Message, Outcome, Parsed, RpcError};

/// The limit the framings get here: small, so that fuzzed inputs cross it.
const MAX_MESSAGE: usize = 256;

/// Decodes `data` delivered in reads of `read_size` bytes (all at once for
/// `usize::MAX`), finishing like `FramedRead` does at the end of the stream.
fn frames<D: Decoder<Item = Frame, Error = io::Error>>(mut decoder: D, data: &[u8], read_size: usize) -> Vec<Frame> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for read in data.chunks(read_size.max(1)) {
        buf.extend_from_slice(read);
        while let Some(frame) = decoder.decode(&mut buf).expect("decoders do not fail") {
            out.push(frame);
        }
    }
    while let Some(frame) = decoder.decode_eof(&mut buf).expect("decoders do not fail") {
        out.push(frame);
    }
    out
}

/// The same frames whole and in reads of 1-16 bytes (the first byte says
/// how many), each message within the limit, and each one parsed.
fn decode_all<D>(new: impl Fn() -> D, data: &[u8]) -> Vec<Frame>
where
    D: Decoder<Item = Frame, Error = io::Error>,
{
    let whole = frames(new(), data, usize::MAX);
    let read_size = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
    let cut = frames(new(), data, read_size);
    assert_eq!(whole, cut, "the frames depend on how the input was cut into reads of {read_size}");
    for frame in &whole {
        if let Frame::Message(bytes) = frame {
            assert!(bytes.len() <= MAX_MESSAGE, "a message of {} bytes passed the limit", bytes.len());
            parse(bytes);
        }
    }
    whole
}

pub fn ndjson(data: &[u8]) {
    let one_by_one = decode_all(|| NdjsonCodec::new(MAX_MESSAGE), data);
    for frame in &one_by_one {
        if let Frame::Message(line) = frame {
            assert!(!line.contains(&b'\n'), "{line:?} is not one line");
            assert!(!line.iter().all(u8::is_ascii_whitespace), "a blank line became a message");
        }
    }
    // The peer's decoder, a read's lines at a time, finds the same, however
    // the input is cut.
    let read_size = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
    for size in [usize::MAX, read_size] {
        let by_reads = lines_apart(frames(NdjsonLines::new(MAX_MESSAGE), data, size));
        assert_eq!(by_reads, one_by_one, "the decoders disagree (reads of {size})");
    }
}

/// Each [`Frame::Lines`] as the frames of its lines, taken apart as a peer
/// takes them: a line read where it lies ([`message::parse_leading`]) must
/// end where the line does, and read as the line reads on its own.
pub(crate) fn lines_apart(frames: Vec<Frame>) -> Vec<Frame> {
    let mut out = Vec::new();
    for frame in frames {
        let Frame::Lines(mut lines) = frame else {
            out.push(frame);
            continue;
        };
        let read_where_it_lies = |rest: &str| {
            message::check_leading(rest);
            message::parse_leading(rest).map(|(_, len)| (bytes::Bytes::copy_from_slice(&rest.as_bytes()[..len]), len))
        };
        while let Some(next) = lines.next_read(read_where_it_lies) {
            let line = match next {
                Next::Read(line, _) => {
                    out.push(Frame::Message(line));
                    continue;
                }
                Next::Line(line) => line,
            };
            out.push(match line {
                Line::Message(text) => Frame::Message(bytes::Bytes::copy_from_slice(text)),
                Line::Text(text) => Frame::Message(bytes::Bytes::copy_from_slice(text.as_bytes())),
                Line::TooLarge => Frame::TooLarge(None),
                Line::Blank => panic!("a blank line was handed over"),
            });
        }
    }
    out
}

pub fn content_length(data: &[u8]) {
    decode_all(|| ContentLengthCodec::new(MAX_MESSAGE), data);
}

/// Bytes from a WebSocket client, arriving in reads of 1-64 bytes (the first
/// byte says how many), through tungstenite with the daemons' settings and
/// rpc-core's reader; every text message is parsed. The server transport
/// (which takes whole text frames without tungstenite) must yield exactly
/// what tokio-tungstenite's stream yields on the same bytes.
pub fn websocket(data: &[u8]) {
    let read_size = data.first().map_or(1, |&b| usize::from(b % 64) + 1);
    for frame in websocket_both_ways(data, read_size) {
        if let Ok(Frame::Text(text)) = &frame {
            parse(text.as_bytes());
        }
    }
}

/// What the server transport reads from `data` in reads of `read_size`
/// bytes, checked to be what tokio-tungstenite's stream reads.
pub(crate) fn websocket_both_ways(data: &[u8], read_size: usize) -> Vec<Result<Frame, io::ErrorKind>> {
    let replay = || Replay { data: data.to_vec(), at: 0, read_size };
    let direct = websocket_frames(codec::websocket::server_transport(replay(), MAX_MESSAGE).reader);
    let config = Some(codec::websocket::config(MAX_MESSAGE));
    let reference = tokio_tungstenite::WebSocketStream::from_raw_socket(replay(), Role::Server, config)
        .now_or_never()
        .expect("a stream over a socket is made at once");
    let reference = websocket_frames(codec::websocket::transport(reference).reader);
    assert_eq!(direct, reference, "the server transport and tokio-tungstenite read the input differently");
    direct
}

/// Everything a WebSocket transport's reader yields, each error as its kind.
fn websocket_frames(mut reader: codec::FrameStream) -> Vec<Result<Frame, io::ErrorKind>> {
    let mut frames = Vec::new();
    loop {
        let Some(item) = reader.next().now_or_never() else {
            panic!("the reader waits for more input after the end of the stream");
        };
        let Some(item) = item else { break };
        let last = frames.last();
        assert!(!matches!(last, Some(Ok(Frame::Unsupported { .. } | Frame::TooLarge(_)))), "a frame after {last:?}");
        let Ok(frame) = item else {
            frames.push(item.map_err(|e| e.kind()));
            break;
        };
        assert!(!matches!(frame, Frame::Message(_)), "a text frame not marked as checked UTF-8");
        if let Frame::Text(text) = &frame {
            assert!(text.len() <= MAX_MESSAGE, "a message of {} bytes passed the limit", text.len());
            assert!(std::str::from_utf8(text.as_bytes()).is_ok(), "a text message that is not UTF-8");
        }
        frames.push(Ok(frame));
    }
    frames
}

/// A client's bytes, read `read_size` at a time, then the end of the stream;
/// what the server writes back (pongs, close frames) is dropped.
struct Replay {
    data: Vec<u8>,
    at: usize,
    read_size: usize,
}

impl AsyncRead for Replay {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let n = self.read_size.min(buf.remaining()).min(self.data.len() - self.at);
        buf.put_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Replay {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Parses a message and checks every reply it could get: an error reply to
/// an invalid one, a result and an error reply to a request, each a valid
/// response with the same id; a request re-serialised reads back the same.
pub fn parse(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        message::check_scanner(text);
        message::check_id_kept(text);
        message::check_leading(text);
        // Each member of a batch is read like a single message.
        if let Ok(items) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text) {
            for item in items {
                message::check_scanner(item.get());
                message::check_id_kept(item.get());
            }
        }
    }
    match message::parse(data, 16) {
        Parsed::Rejected(error) => replies_read_back(&Id::Null, &error),
        Parsed::Single(item) => check(item),
        Parsed::Batch(items) => {
            assert!(!items.is_empty() && items.len() <= 16, "a batch of {}", items.len());
            items.into_iter().for_each(check);
        }
    }
}

fn check(item: Result<Message<'_>, message::Invalid>) {
    match item {
        Err(invalid) => replies_read_back(&invalid.id, &invalid.error),
        Ok(Message::Request { id, method, params }) => {
            replies_read_back(&id, &RpcError::method_not_found(&method));
            let text = message::request(Some(&id), &method, &params).expect("a request serialises");
            match message::parse(&text, 1) {
                Parsed::Single(Ok(Message::Request { id: id2, method: method2, params: params2 })) => {
                    assert_eq!((&id2, &method2), (&id, &method));
                    assert_eq!(params2.map(|p| p.get()), params.map(|p| p.get()));
                }
                other => panic!("a request re-serialised reads as {other:?}"),
            }
        }
        Ok(Message::Notification { .. } | Message::Response { .. }) => {}
    }
}

/// Both replies to a message with `id` read back as responses to `id`.
fn replies_read_back(id: &Id, error: &RpcError) {
    match message::parse(&message::response_err(id, error), 1) {
        Parsed::Single(Ok(Message::Response { id: back, outcome: Outcome::Error(e) })) => {
            assert_eq!((&back, &*e), (id, error));
        }
        other => panic!("the error reply to id {id} reads as {other:?}"),
    }
    match message::parse(&message::response_ok(id, b"null"), 1) {
        Parsed::Single(Ok(Message::Response { id: back, outcome: Outcome::Result(r) })) => {
            assert_eq!((&back, r.get()), (id, "null"));
        }
        other => panic!("the result reply to id {id} reads as {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::codec::test_support::random_chunks;

    /// A cheap stand-in for the fuzzer in every test run: mutated JSON-RPC-ish
    /// inputs through every entry point.
    #[test]
    fn fuzz_entry_points_survive_mutated_inputs() {
        let seeds: [&[u8]; 6] = [
            br#"{"jsonrpc":"2.0","method":"m","params":[1,{"a":"\u00e9"}],"id":1e5}"#,
            b"Content-Length: 30\r\nContent-Type: x; charset=utf-8\r\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"m\"}",
            b"[{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":null},1,[],{}]\n\r\n{",
            b"content-length: 99999999999999999999\r\n\r\n",
            b"\xff\xfe\x00{\"id\":[",
            br#"{"jsonrpc":"2.0","error":{"code":1.5,"message":[]},"id":-0}"#,
        ];
        let mut n = 0u64;
        for seed in seeds {
            for round in 0..300 {
                let mut data = seed.to_vec();
                for (i, r) in random_chunks(round * 31 + n, 4, 256).into_iter().enumerate() {
                    if data.is_empty() {
                        break;
                    }
                    let at = (r * 7 + i) % data.len();
                    match r % 3 {
                        0 => data[at] = r as u8,
                        1 => data.insert(at, b"{}[]\":,\\\n0"[r % 10]),
                        _ => drop(data.remove(at)),
                    }
                }
                super::ndjson(&data);
                super::content_length(&data);
                super::parse(&data);
                super::websocket(&data);
                n += 1;
            }
        }
    }

    /// The committed seeds of each target (fuzz/seeds/<target>/) through
    /// their entry point.
    #[test]
    fn the_seed_corpora_pass() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
        for (target, run) in [
            ("ndjson", super::ndjson as fn(&[u8])),
            ("content_length", super::content_length),
            ("message", super::parse),
            ("websocket", super::websocket),
        ] {
            let dir = seeds.join(target);
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                run(&std::fs::read(entry.unwrap().path()).unwrap());
            }
        }
    }
}
