//! LSP-style framing: `Content-Length: N\r\n\r\n` followed by exactly N bytes.
//!
//! Built to survive a misbehaving child process: header names are
//! case-insensitive, other headers are ignored, bare `\n` line endings and stray
//! blank lines are tolerated, and anything that is not a header makes the decoder
//! skip forward to the next `Content-Length` instead of killing the stream. A body
//! over the limit is skipped byte for byte as it arrives, never buffered.

use std::io;

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::sniff::{SNIFF_PREFIX, Sniffed};
use super::{EncodeJson, Frame, Outbound};

/// Longest header line we are willing to buffer before calling it garbage.
const MAX_HEADER_LINE: usize = 8 * 1024;
const HEADER_NAME: &[u8] = b"content-length";
/// The head every message is written with, up to its length.
const HEAD: &[u8] = b"Content-Length: ";

#[derive(Clone, Debug)]
pub struct ContentLengthCodec {
    max_body: usize,
    state: State,
}

#[derive(Clone, Debug)]
enum State {
    /// Reading header lines; `length` once a valid Content-Length was seen.
    Headers { length: Option<usize>, any_header: bool },
    /// Reading a body of this many bytes.
    Body(usize),
    /// Skipping an oversized body: bytes still to drop, and its first bytes.
    Skip { remaining: usize, prefix: Vec<u8> },
    /// After garbage: dropping bytes until a `Content-Length` header shows up.
    Resync,
}

impl ContentLengthCodec {
    pub fn new(max_body: usize) -> Self {
        ContentLengthCodec { max_body, state: State::Headers { length: None, any_header: false } }
    }

    fn resync(&mut self, why: &str, line: &[u8]) {
        tracing::warn!(
            reason = why,
            line = %String::from_utf8_lossy(&line[..line.len().min(80)]),
            "bad Content-Length framing; skipping to the next header"
        );
        self.state = State::Resync;
    }
}

impl Decoder for ContentLengthCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        loop {
            match &mut self.state {
                State::Headers { length, any_header } => {
                    // The head every peer here writes, read in one step; the
                    // lines below read it the same way.
                    if length.is_none()
                        && !*any_header
                        && let Some((n, head)) = usual_head(buf)
                    {
                        buf.advance(head);
                        self.state = if n > self.max_body {
                            State::Skip { remaining: n, prefix: Vec::new() }
                        } else {
                            buf.reserve(n.saturating_sub(buf.len()));
                            State::Body(n)
                        };
                        continue;
                    }
                    let Some(nl) = memchr::memchr(b'\n', buf) else {
                        if buf.len() > MAX_HEADER_LINE {
                            let line = buf.split_to(buf.len() - HEADER_NAME.len());
                            self.resync("header line too long", &line);
                            continue;
                        }
                        super::make_room(buf);
                        return Ok(None);
                    };
                    // The line is read where it lies, then consumed.
                    let consumed = nl + 1;
                    let line = trim_line_end(&buf[..consumed]);
                    if line.is_empty() {
                        buf.advance(consumed);
                        match (*length, *any_header) {
                            (_, false) => continue, // stray blank line before a header
                            (Some(n), true) if n > self.max_body => {
                                self.state = State::Skip { remaining: n, prefix: Vec::new() };
                            }
                            (Some(n), true) => {
                                buf.reserve(n.saturating_sub(buf.len()));
                                self.state = State::Body(n);
                            }
                            (None, true) => self.resync("headers without Content-Length", b""),
                        }
                        continue;
                    }
                    let Some(colon) = line.iter().position(|&b| b == b':') else {
                        self.resync("not a header", line);
                        buf.advance(consumed);
                        continue;
                    };
                    let (name, value) = (line[..colon].trim_ascii(), line[colon + 1..].trim_ascii());
                    if name.eq_ignore_ascii_case(HEADER_NAME) {
                        match std::str::from_utf8(value).ok().and_then(|v| v.parse::<usize>().ok()) {
                            Some(n) => *length = Some(n),
                            None => {
                                self.resync("Content-Length is not a number", line);
                                buf.advance(consumed);
                                continue;
                            }
                        }
                    } else if name.eq_ignore_ascii_case(b"content-type") && !is_utf8_content_type(value) {
                        tracing::warn!(
                            content_type = %String::from_utf8_lossy(value),
                            "message in a charset other than utf-8; it will be parsed as utf-8"
                        );
                    }
                    *any_header = true;
                    buf.advance(consumed);
                }
                State::Body(n) => {
                    let n = *n;
                    if buf.len() < n {
                        return Ok(None);
                    }
                    let body = super::take_message(buf, n, n);
                    self.state = State::Headers { length: None, any_header: false };
                    return Ok(Some(Frame::Message(body)));
                }
                State::Skip { remaining, prefix } => {
                    let take = (*remaining).min(buf.len());
                    let keep = take.min(SNIFF_PREFIX - prefix.len());
                    prefix.extend_from_slice(&buf[..keep]);
                    buf.advance(take);
                    *remaining -= take;
                    if *remaining > 0 {
                        return Ok(None);
                    }
                    let sniffed = Sniffed::scan(prefix);
                    self.state = State::Headers { length: None, any_header: false };
                    return Ok(Some(Frame::TooLarge(Some(sniffed))));
                }
                State::Resync => match find_header(buf) {
                    Some(at) => {
                        buf.advance(at);
                        self.state = State::Headers { length: None, any_header: false };
                    }
                    None => {
                        // Keep a tail that may be the start of a split header name.
                        let keep = HEADER_NAME.len().min(buf.len());
                        buf.advance(buf.len() - keep);
                        return Ok(None);
                    }
                },
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        let frame = self.decode(buf)?;
        if frame.is_none() && !buf.iter().all(u8::is_ascii_whitespace) {
            tracing::warn!(bytes = buf.len(), "stream ended inside a Content-Length message");
            buf.clear();
        }
        Ok(frame)
    }
}

impl Encoder<Outbound> for ContentLengthCodec {
    type Error = io::Error;

    /// Header and body go into the buffer together, so they reach the stream as
    /// one unit and cannot interleave with another message.
    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> io::Result<()> {
        match item {
            Outbound::Message { json, .. } => Self::encode_json(&json, dst),
            Outbound::Ping | Outbound::Close { .. } => Ok(()),
        }
    }
}

impl EncodeJson for ContentLengthCodec {
    fn encode_json(json: &[u8], dst: &mut BytesMut) -> io::Result<()> {
        let mut length = itoa::Buffer::new();
        let length = length.format(json.len()).as_bytes();
        dst.reserve(HEAD.len() + length.len() + 4 + json.len());
        dst.put_slice(HEAD);
        dst.put_slice(length);
        dst.put_slice(b"\r\n\r\n");
        dst.put_slice(json);
        Ok(())
    }
}

/// `Content-Length: N\r\n\r\n` at the front of `buf`, with at most nine
/// digits: the body's length and the head's. `None` for any other head (or
/// one not all there yet), which the header lines then read.
pub fn usual_head(buf: &[u8]) -> Option<(usize, usize)> {
    let after = buf.strip_prefix(HEAD)?;
    let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
    if !(1..=9).contains(&digits) || !after[digits..].starts_with(b"\r\n\r\n") {
        return None;
    }
    let n = after[..digits].iter().fold(0, |n, d| n * 10 + usize::from(d - b'0'));
    Some((n, HEAD.len() + digits + 4))
}

fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_utf8_content_type(value: &[u8]) -> bool {
    let value = String::from_utf8_lossy(value).to_ascii_lowercase();
    value
        .split(';')
        .filter_map(|param| param.trim().strip_prefix("charset="))
        .all(|charset| matches!(charset.trim_matches('"'), "utf-8" | "utf8"))
}

/// Where the next `Content-Length` header name starts, ignoring case.
fn find_header(buf: &[u8]) -> Option<usize> {
    buf.windows(HEADER_NAME.len()).position(|w| w.eq_ignore_ascii_case(HEADER_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_support::{decode_in_chunks, random_chunks};
    use crate::message::{Id, Kind};

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    fn bodies(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f {
                Frame::Message(b) => String::from_utf8(b.to_vec()).unwrap(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn lengths_are_bytes_not_characters() {
        let body = r#"{"name":"Zoë ✓ 🦀"}"#;
        assert_ne!(body.len(), body.chars().count());
        let frames = decode_in_chunks(ContentLengthCodec::new(1024), &frame(body), &[1]);
        assert_eq!(bodies(&frames), vec![body]);
    }

    #[test]
    fn same_messages_byte_by_byte_in_one_chunk_and_random_splits() {
        let mut input = frame(r#"{"a":1}"#);
        input.extend_from_slice(
            b"\r\n\ncontent-length: 7\ncontent-type: application/vscode-jsonrpc; charset=utf-8\n\n{\"b\":2}",
        );
        input.extend_from_slice(b"CONTENT-LENGTH:7\r\n\r\n{\"c\":3}");
        let expected = vec![r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#];
        assert_eq!(bodies(&decode_in_chunks(ContentLengthCodec::new(1024), &input, &[1])), expected);
        assert_eq!(bodies(&decode_in_chunks(ContentLengthCodec::new(1024), &input, &[input.len()])), expected);
        for seed in 1..50 {
            let chunks = random_chunks(seed, 64, 13);
            let got = bodies(&decode_in_chunks(ContentLengthCodec::new(1024), &input, &chunks));
            assert_eq!(got, expected, "seed {seed}");
        }
    }

    #[test]
    fn the_usual_head_read_in_one_step_reads_as_its_lines_do() {
        // Leading zeros, ten digits (past the one-step read), heads cut anywhere.
        let mut input = b"Content-Length: 007\r\n\r\n{\"a\":1}".to_vec();
        input.extend_from_slice(b"Content-Length: 0000000007\r\n\r\n{\"b\":2}");
        input.extend(frame(r#"{"c":3}"#));
        input.extend_from_slice(b"Content-Length: 7\r\nX-Other: 1\r\n\r\n{\"d\":4}");
        for chunks in [&[1usize][..], &[input.len()], &random_chunks(7, 64, 9)] {
            let got = bodies(&decode_in_chunks(ContentLengthCodec::new(1024), &input, chunks));
            assert_eq!(got, vec![r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#, r#"{"d":4}"#]);
        }
    }

    #[test]
    fn resynchronises_after_garbage_and_bad_headers() {
        let mut input = b"this is not a header\r\n\x00\xff junk".to_vec();
        input.extend(frame(r#"{"ok":1}"#));
        input.extend_from_slice(b"Content-Length: twelve\r\n\r\n{\"lost\":1}");
        input.extend(frame(r#"{"ok":2}"#));
        input.extend_from_slice(b"X-Other: 1\r\n\r\n{\"no length\":1}");
        input.extend(frame(r#"{"ok":3}"#));
        for chunks in [&[1usize][..], &[input.len()], &random_chunks(3, 64, 17)] {
            let got = bodies(&decode_in_chunks(ContentLengthCodec::new(1024), &input, chunks));
            assert_eq!(got, vec![r#"{"ok":1}"#, r#"{"ok":2}"#, r#"{"ok":3}"#]);
        }
    }

    #[test]
    fn oversized_body_is_skipped_exactly_and_sniffed() {
        let big = format!(r#"{{"jsonrpc":"2.0","id":41,"method":"m","params":"{}"}}"#, "x".repeat(3000));
        let mut input = frame(&big);
        input.extend(frame(r#"{"after":1}"#));
        for chunks in [&[1usize][..], &[input.len()], &random_chunks(5, 64, 200)] {
            let frames = decode_in_chunks(ContentLengthCodec::new(100), &input, chunks);
            assert_eq!(frames.len(), 2);
            let Frame::TooLarge(Some(sniffed)) = &frames[0] else { panic!("{:?}", frames[0]) };
            assert_eq!(sniffed.id, Some(Id::from(41)));
            assert!(sniffed.has_method);
            assert_eq!(bodies(&frames[1..]), vec![r#"{"after":1}"#]);
        }
    }

    #[test]
    fn oversized_body_is_not_buffered() {
        let mut codec = ContentLengthCodec::new(100);
        let mut buf = BytesMut::from(&b"Content-Length: 100000000\r\n\r\n"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        for _ in 0..100 {
            buf.extend_from_slice(&[b' '; 10_000]);
            assert_eq!(codec.decode(&mut buf).unwrap(), None);
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn encoder_writes_byte_length_and_body_together() {
        let mut codec = ContentLengthCodec::new(100);
        let mut dst = BytesMut::new();
        codec.encode(Outbound::message(Kind::Request, "{\"é\":1}"), &mut dst).unwrap();
        assert_eq!(&dst[..], "Content-Length: 8\r\n\r\n{\"é\":1}".as_bytes());
    }
}
