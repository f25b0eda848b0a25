//! Newline-delimited JSON: one message (or batch) per line.
//!
//! `\r\n` endings are accepted and blank lines ignored. A line longer than the
//! limit is reported once as [`Frame::TooLarge`] and the rest of it is thrown
//! away as it arrives, so an 11 MiB line costs at most `max_line` + 1 bytes of memory
//! and the connection goes on with the next line.
//!
//! Two decoders apply these rules: [`NdjsonCodec`] yields a frame a line,
//! for whoever reads lines one by one; [`NdjsonLines`] yields every complete
//! line a read brought as one [`Frame::Lines`], which a peer takes apart
//! where it lies (a pipelining client sends dozens a read, and a frame of
//! its own each would cost each line an allocation and a copy).

use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::{EncodeJson, Frame, Outbound};

#[derive(Clone, Debug)]
pub struct NdjsonCodec {
    max_line: usize,
    /// Bytes of the buffer already searched for `\n`, so a long line arriving in
    /// small reads is scanned once, not once per read.
    searched: usize,
    /// Inside an oversized line: drop everything up to the next `\n`.
    discarding: bool,
}

impl NdjsonCodec {
    pub fn new(max_line: usize) -> Self {
        NdjsonCodec { max_line, searched: 0, discarding: false }
    }

    /// The line not yet ended when the input ends (`printf '{...}' | nc`):
    /// still a message. For both decoders, after their own `decode`.
    fn last_line(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if self.discarding || buf.iter().all(u8::is_ascii_whitespace) {
            buf.clear();
            return None;
        }
        self.searched = 0;
        let line = buf.split().freeze();
        match Line::of(&line, self.max_line) {
            Line::Blank => None,
            Line::TooLarge => Some(Frame::TooLarge(None)),
            Line::Message(text) => Some(Frame::Message(line.slice_ref(text))),
            Line::Text(text) => Some(Frame::Message(line.slice_ref(text.as_bytes()))),
        }
    }

    /// No `\n` in the rest of the buffer: an unfinished line that is already
    /// too long is reported and thrown away as it arrives.
    fn unfinished(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        // One byte past the limit may be the `\r` of a `\r\n` still
        // to come: judged now, a line at the limit would be refused or
        // not depending on where the reads were cut.
        if buf.len() > self.max_line.saturating_add(1) {
            buf.clear();
            self.searched = 0;
            self.discarding = true;
            return Some(Frame::TooLarge(None));
        }
        self.searched = buf.len();
        super::make_room(buf);
        None
    }

    /// Drops the rest of an oversized line: `false` while its end has not
    /// arrived yet.
    fn skip_discarded(&mut self, buf: &mut BytesMut) -> bool {
        if !self.discarding {
            return true;
        }
        match memchr::memchr(b'\n', buf) {
            Some(end) => {
                buf.advance(end + 1);
                self.discarding = false;
                self.searched = 0;
                true
            }
            None => {
                buf.clear();
                false
            }
        }
    }
}

/// What one line (without its `\n`) is to the peer.
#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    /// Only whitespace: ignored.
    Blank,
    /// A message, its `\r` taken off.
    Message(&'a [u8]),
    /// A message from a read whose lines were checked as UTF-8 together
    /// ([`Lines`]): one check a read rather than one a line.
    Text(&'a str),
    /// Longer than the limit: answered once, with `id: null`.
    TooLarge,
}

impl<'a> Line<'a> {
    fn of(line: &'a [u8], max_line: usize) -> Line<'a> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > max_line {
            Line::TooLarge
        } else if line.iter().all(u8::is_ascii_whitespace) {
            Line::Blank
        } else {
            Line::Message(line)
        }
    }
}

impl Decoder for NdjsonCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        loop {
            if !self.skip_discarded(buf) {
                return Ok(None);
            }
            let Some(end) = memchr::memchr(b'\n', &buf[self.searched..]).map(|i| self.searched + i) else {
                return Ok(self.unfinished(buf));
            };
            self.searched = 0;
            let len = match Line::of(&buf[..end], self.max_line) {
                Line::Message(line) => line.len(),
                Line::Text(line) => line.len(),
                Line::Blank => {
                    buf.advance(end + 1);
                    continue;
                }
                Line::TooLarge => {
                    buf.advance(end + 1);
                    return Ok(Some(Frame::TooLarge(None)));
                }
            };
            return Ok(Some(Frame::Message(super::take_message(buf, len, end + 1))));
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        Ok(self.last_line(buf))
    }
}

/// NDJSON a read at a time: the complete lines in the buffer, as one
/// [`Frame::Lines`] (the same rules as [`NdjsonCodec`], applied as the lines
/// are taken).
#[derive(Clone, Debug)]
pub struct NdjsonLines(NdjsonCodec);

impl NdjsonLines {
    pub fn new(max_line: usize) -> Self {
        NdjsonLines(NdjsonCodec::new(max_line))
    }
}

impl Decoder for NdjsonLines {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        let codec = &mut self.0;
        if !codec.skip_discarded(buf) {
            return Ok(None);
        }
        let Some(end) = memchr::memrchr(b'\n', &buf[codec.searched..]).map(|i| codec.searched + i) else {
            return Ok(codec.unfinished(buf));
        };
        codec.searched = 0;
        let chunk = buf.split_to(end + 1).freeze();
        Ok(Some(Frame::Lines(Lines::new(chunk, codec.max_line))))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        Ok(self.0.last_line(buf))
    }
}

/// A line of [`Lines::next_read`]: what its reader read, and the line's
/// length without its `\n`; or the line as [`Lines::next_line`] gives it.
#[derive(Debug)]
pub enum Next<'a, T> {
    Read(T, usize),
    Line(Line<'a>),
}

/// Complete lines as one read brought them, each ending in `\n`, taken one
/// at a time with [`Lines::next_line`] (blank lines skipped).
#[derive(Debug, PartialEq)]
pub struct Lines {
    chunk: Bytes,
    at: usize,
    max_line: usize,
    /// The whole chunk is UTF-8: its lines are [`Line::Text`]. When one line
    /// is not, each is checked on its own, and only that one is refused.
    utf8: bool,
}

impl Lines {
    fn new(chunk: Bytes, max_line: usize) -> Lines {
        // One check for the read: per line, the check's own setup cost more
        // than its bytes (a 45-byte `ping` took 95 instructions).
        let utf8 = std::str::from_utf8(&chunk).is_ok();
        Lines { chunk, at: 0, max_line, utf8 }
    }

    /// The next line, read by `read` where it lies when it can: `read` is
    /// given the rest of the read from the line's start (lines after it
    /// too), and answers with what it read and the line's length: a `\n`
    /// must follow at once (checked) and none come before (its promise).
    /// What it leaves, a line over the limit, and a length no `\n` follows
    /// come as [`Lines::next_line`] gives them. A reader that finds where a message ends spares the search for
    /// the line's end, a second pass over every byte.
    #[allow(unsafe_code)]
    #[inline(always)]
    pub fn next_read<'s, T>(&'s mut self, read: impl FnOnce(&'s str) -> Option<(T, usize)>) -> Option<Next<'s, T>> {
        let Lines { chunk, at, max_line, utf8 } = self;
        let chunk: &'s [u8] = chunk;
        if *utf8 && let Some(rest) = chunk.get(*at..) {
            // SAFETY: `utf8` says `from_utf8` accepted the whole chunk, and
            // `at` is its start or just after a `\n`, a single byte in
            // UTF-8: a character boundary, and a part of valid UTF-8 from a
            // character boundary to its end is valid UTF-8.
            let rest = unsafe { std::str::from_utf8_unchecked(rest) };
            // The `\n` after the line is checked, not trusted: `at` must land
            // just after one for the next line's `from_utf8_unchecked`.
            let ends_a_line = |len: usize| len <= *max_line && rest.as_bytes().get(len) == Some(&b'\n');
            if let Some((item, len)) = read(rest).filter(|&(_, len)| ends_a_line(len)) {
                debug_assert!(!rest[..len].contains('\n'), "the reader read past a line's end");
                *at += len + 1;
                return Some(Next::Read(item, len));
            }
        }
        next_line(chunk, at, *max_line, *utf8).map(Next::Line)
    }

    /// The next line that is not blank, if any is left.
    pub fn next_line(&mut self) -> Option<Line<'_>> {
        next_line(&self.chunk, &mut self.at, self.max_line, self.utf8)
    }
}

/// [`Lines::next_line`] of `chunk` from `at` on.
#[allow(unsafe_code)]
fn next_line<'c>(chunk: &'c [u8], at: &mut usize, max_line: usize, utf8: bool) -> Option<Line<'c>> {
    loop {
        let rest = chunk.get(*at..).filter(|rest| !rest.is_empty())?;
        let len = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        *at += len + 1;
        return Some(match Line::of(&rest[..len], max_line) {
            Line::Blank => continue,
            // SAFETY: `utf8` says `from_utf8` accepted the whole chunk,
            // and `line` is a part of it that starts at its start or just
            // after a `\n`, and ends at its end or just before a `\n` or
            // `\r`: single bytes in UTF-8, so both ends are character
            // boundaries, and a part of valid UTF-8 between character
            // boundaries is valid UTF-8.
            Line::Message(line) if utf8 => Line::Text(unsafe { std::str::from_utf8_unchecked(line) }),
            other => other,
        });
    }
}

impl Encoder<Outbound> for NdjsonCodec {
    type Error = io::Error;

    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> io::Result<()> {
        match item {
            Outbound::Message { json, .. } => Self::encode_json(&json, dst),
            Outbound::Ping | Outbound::Close { .. } => Ok(()),
        }
    }
}

impl EncodeJson for NdjsonCodec {
    fn encode_json(json: &[u8], dst: &mut BytesMut) -> io::Result<()> {
        dst.reserve(json.len() + 1);
        let start = dst.len();
        dst.put_slice(json);
        // Raw values passed through from other framings may be pretty-printed.
        // In valid JSON a raw line break can only be whitespace, so turning it
        // into a space keeps the message intact and the framing sound.
        if memchr::memchr2(b'\n', b'\r', json).is_some() {
            for b in &mut dst[start..] {
                if *b == b'\n' || *b == b'\r' {
                    *b = b' ';
                }
            }
        }
        dst.put_u8(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::test_support::{decode_in_chunks, random_chunks};
    use crate::message::Kind;

    #[test]
    fn a_read_always_gets_room_once_the_lines_are_taken() {
        let mut codec = NdjsonCodec::new(1 << 20);
        let mut buf = BytesMut::with_capacity(super::super::READ_ROOM);
        let line = format!("{}\n", "x".repeat(99));
        // Lines read and handled (dropped) one by one, as the peer does, until
        // the buffer's room is nearly used up.
        while buf.capacity() - buf.len() >= line.len() {
            buf.extend_from_slice(line.as_bytes());
            assert!(matches!(codec.decode(&mut buf).unwrap(), Some(Frame::Message(_))));
        }
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(
            buf.capacity() - buf.len() >= super::super::READ_ROOM / 2,
            "only {} bytes of room",
            buf.capacity() - buf.len()
        );
    }

    /// The messages both decoders find in `input` fed in `chunks`; they
    /// must agree.
    fn lines(max_line: usize, input: &[u8], chunks: &[usize]) -> Vec<String> {
        let one_by_one = messages(decode_in_chunks(NdjsonCodec::new(max_line), input, chunks));
        let by_reads = messages(decode_in_chunks(NdjsonLines::new(max_line), input, chunks));
        assert_eq!(one_by_one, by_reads, "the two decoders disagree");
        one_by_one
    }

    /// What a pipelining client's read brings is one frame, whatever lines
    /// it holds, and the buffer gets its room back once they are handled.
    #[test]
    fn a_read_of_many_lines_is_one_frame_and_its_buffer_is_reused() {
        let mut codec = NdjsonLines::new(1 << 20);
        let mut buf = BytesMut::with_capacity(super::super::READ_ROOM);
        let start = buf.as_ptr();
        for _ in 0..10 {
            buf.extend_from_slice(b"{\"a\":1}\n\r\n  \n{\"b\":2}\r\n{\"c\"");
            let Some(Frame::Lines(mut lines)) = codec.decode(&mut buf).unwrap() else { panic!("no lines") };
            assert_eq!(lines.next_line(), Some(Line::Text("{\"a\":1}")));
            assert_eq!(lines.next_line(), Some(Line::Text("{\"b\":2}")));
            assert_eq!(lines.next_line(), None);
            drop(lines);
            assert!(codec.decode(&mut buf).unwrap().is_none());
            buf.extend_from_slice(b":3}\n");
            let Some(Frame::Lines(mut lines)) = codec.decode(&mut buf).unwrap() else { panic!("no lines") };
            assert_eq!(lines.next_line(), Some(Line::Text("{\"c\":3}")));
            assert_eq!(lines.next_line(), None);
        }
        buf.reserve(super::super::READ_ROOM);
        assert_eq!(buf.as_ptr(), start, "the read buffer was not reused");
    }

    /// A read's lines are checked as UTF-8 together; when one is not UTF-8,
    /// each goes to the parser as bytes, to be checked (and refused) alone.
    #[test]
    fn a_read_is_text_when_all_of_it_is_utf8() {
        let mut codec = NdjsonLines::new(1 << 20);
        let mut buf = BytesMut::from(&b"{\"a\":\"\xc3\xa9\"}\n{\"b\":2}\n"[..]);
        let Some(Frame::Lines(mut lines)) = codec.decode(&mut buf).unwrap() else { panic!("no lines") };
        assert_eq!(lines.next_line(), Some(Line::Text("{\"a\":\"é\"}")));
        assert_eq!(lines.next_line(), Some(Line::Text("{\"b\":2}")));
        let mut buf = BytesMut::from(&b"{\"a\":1}\n{\"b\":\"\xc3\x28\"}\n{\"c\":3}\n"[..]);
        let Some(Frame::Lines(mut lines)) = codec.decode(&mut buf).unwrap() else { panic!("no lines") };
        assert_eq!(lines.next_line(), Some(Line::Message(b"{\"a\":1}")));
        assert_eq!(lines.next_line(), Some(Line::Message(b"{\"b\":\"\xc3\x28\"}")));
        assert_eq!(lines.next_line(), Some(Line::Message(b"{\"c\":3}")));
    }

    /// Each frame as text, the lines of a [`Frame::Lines`] one by one.
    fn messages(frames: Vec<Frame>) -> Vec<String> {
        crate::fuzzing::lines_apart(frames)
            .iter()
            .map(|frame| match frame {
                Frame::Message(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    const INPUT: &[u8] = b"{\"a\":1}\n\n  \r\n{\"b\":\"\xc3\xa9\"}\r\n[{\"c\":3}]\n{\"tail\":true}";

    #[test]
    fn same_messages_byte_by_byte_in_one_chunk_and_random_splits() {
        let expected = vec![r#"{"a":1}"#, r#"{"b":"é"}"#, r#"[{"c":3}]"#, r#"{"tail":true}"#];
        assert_eq!(lines(1024, INPUT, &[1]), expected);
        assert_eq!(lines(1024, INPUT, &[INPUT.len()]), expected);
        for seed in 1..50 {
            let chunks = random_chunks(seed, 64, 9);
            assert_eq!(lines(1024, INPUT, &chunks), expected, "seed {seed}");
        }
    }

    /// Messages a peer reads where they lie in the read (the common layouts,
    /// a `\n` right after them) end and read as the lines they are: the same
    /// frames as the line-at-a-time decoder, however the reads are cut, with
    /// the limit, `\r\n`, blank lines and a raw line break inside a value
    /// (which ends the line there) each taken as the line's own reading takes it.
    #[test]
    fn messages_read_where_they_lie_end_where_their_lines_end() {
        let ping = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{}}}}"#);
        let long = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(80));
        let broken = r#"{"jsonrpc":"2.0","id":2,"method":"m","params":{"a":"#;
        let input = format!("{}\n{}\r\n\n{}\n{long}\n{broken}\n1}}}}\n{}", ping(1), ping(22), ping(333), ping(4444));
        let expected = [ping(1), ping(22), ping(333), "TooLarge(None)".into(), broken.into(), "1}}".into(), ping(4444)];
        for chunks in [&[1usize][..], &[input.len()], &random_chunks(3, 100, 40)] {
            assert_eq!(lines(100, input.as_bytes(), chunks), expected);
        }
    }

    /// A reader's length that no `\n` follows is not taken: the line comes
    /// whole, as if the reader had read nothing.
    #[test]
    fn a_length_that_does_not_end_a_line_is_not_taken() {
        let mut codec = NdjsonLines::new(1 << 20);
        let mut buf = BytesMut::from(&b"{\"a\":1}\n{\"b\":2}\n"[..]);
        let Some(Frame::Lines(mut lines)) = codec.decode(&mut buf).unwrap() else { panic!("no lines") };
        assert!(matches!(lines.next_read(|_| Some(((), 3))), Some(Next::Line(Line::Text("{\"a\":1}")))));
        assert!(matches!(lines.next_read(|_| Some(((), 7))), Some(Next::Read((), 7))));
        assert!(lines.next_read(|_| Some(((), 0))).is_none());
    }

    #[test]
    fn oversized_line_is_reported_once_and_skipped() {
        let mut input = b"{\"first\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend_from_slice(b"\n{\"after\":2}\n");
        for chunks in [&[1usize][..], &[input.len()], &random_chunks(7, 100, 300)] {
            assert_eq!(lines(100, &input, chunks), vec![r#"{"first":1}"#, "TooLarge(None)", r#"{"after":2}"#]);
        }
    }

    /// The ndjson fuzz target's check that frames do not depend on how the
    /// input is cut into reads failed on this: a line of exactly the limit
    /// ending in `\r\n` was refused when a read ended between `\r` and `\n`.
    #[test]
    fn a_line_at_the_limit_passes_however_its_crlf_is_cut() {
        let mut input = vec![b'x'; 100];
        input.extend_from_slice(b"\r\n");
        let line = String::from_utf8(vec![b'x'; 100]).unwrap();
        for chunks in [&[101usize, 1][..], &[input.len()], &[1]] {
            assert_eq!(lines(100, &input, chunks), vec![line.clone()]);
        }
        // One byte more is too large, cut anywhere, and so is an unfinished line at the end.
        let mut long = vec![b'y'; 101];
        long.extend_from_slice(b"\r\n");
        for chunks in [&[101usize, 1][..], &[102, 1], &[long.len()], &[1]] {
            assert_eq!(lines(100, &long, chunks), vec!["TooLarge(None)"]);
        }
        assert_eq!(lines(100, &long[..101], &[1]), vec!["TooLarge(None)"]);
    }

    #[test]
    fn oversized_line_is_not_buffered() {
        let mut codec = NdjsonCodec::new(100);
        let mut buf = BytesMut::new();
        for _ in 0..1000 {
            buf.extend_from_slice(&[b'y'; 1000]);
            let _ = codec.decode(&mut buf).unwrap();
            assert!(buf.len() <= 1000, "buffer grew to {}", buf.len());
        }
    }

    #[test]
    fn encoder_appends_newline_and_flattens_raw_line_breaks() {
        let mut codec = NdjsonCodec::new(100);
        let mut dst = BytesMut::new();
        codec.encode(Outbound::message(Kind::Response, &b"{\n  \"a\": 1\r\n}"[..]), &mut dst).unwrap();
        codec.encode(Outbound::Ping, &mut dst).unwrap();
        assert_eq!(&dst[..], b"{   \"a\": 1  }\n");
    }
}
