//! Newline-delimited JSON: one message (or batch) per line.
//!
//! `\r\n` endings are accepted and blank lines ignored. A line longer than the
//! limit is reported once as [`Frame::TooLarge`] and the rest of it is thrown
//! away as it arrives, so an 11 MiB line costs at most `max_line` + 1 bytes of memory
//! and the connection goes on with the next line.

use std::io;

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::{Frame, Outbound};

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
}

impl Decoder for NdjsonCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        loop {
            let newline = memchr::memchr(b'\n', &buf[self.searched..]).map(|i| self.searched + i);
            if self.discarding {
                match newline {
                    Some(end) => {
                        let _ = buf.split_to(end + 1);
                        self.discarding = false;
                        self.searched = 0;
                        continue;
                    }
                    None => {
                        buf.clear();
                        return Ok(None);
                    }
                }
            }
            let Some(end) = newline else {
                // One byte past the limit may be the `\r` of a `\r\n` still
                // to come: judged now, a line at the limit would be refused or
                // not depending on where the reads were cut.
                if buf.len() > self.max_line.saturating_add(1) {
                    buf.clear();
                    self.searched = 0;
                    self.discarding = true;
                    return Ok(Some(Frame::TooLarge(None)));
                }
                self.searched = buf.len();
                super::make_room(buf);
                return Ok(None);
            };
            self.searched = 0;
            let len = if end > 0 && buf[end - 1] == b'\r' { end - 1 } else { end };
            if len > self.max_line {
                buf.advance(end + 1);
                return Ok(Some(Frame::TooLarge(None)));
            }
            if buf[..len].iter().all(u8::is_ascii_whitespace) {
                buf.advance(end + 1);
                continue;
            }
            let line = super::take_message(buf, len, end + 1);
            return Ok(Some(Frame::Message(line)));
        }
    }

    /// A last line without its `\n` (`printf '{...}' | nc`) is still a message.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        if self.discarding || buf.iter().all(u8::is_ascii_whitespace) {
            buf.clear();
            return Ok(None);
        }
        let mut line = buf.split();
        self.searched = 0;
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        if line.len() > self.max_line {
            return Ok(Some(Frame::TooLarge(None)));
        }
        Ok(Some(Frame::Message(line.freeze())))
    }
}

impl Encoder<Outbound> for NdjsonCodec {
    type Error = io::Error;

    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> io::Result<()> {
        if let Outbound::Message { json, .. } = item {
            dst.reserve(json.len() + 1);
            let start = dst.len();
            dst.put_slice(&json);
            // Raw values passed through from other framings may be pretty-printed.
            // In valid JSON a raw line break can only be whitespace, so turning it
            // into a space keeps the message intact and the framing sound.
            if memchr::memchr2(b'\n', b'\r', &json).is_some() {
                for b in &mut dst[start..] {
                    if *b == b'\n' || *b == b'\r' {
                        *b = b' ';
                    }
                }
            }
            dst.put_u8(b'\n');
        }
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

    fn messages(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f {
                Frame::Message(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    const INPUT: &[u8] = b"{\"a\":1}\n\n  \r\n{\"b\":\"\xc3\xa9\"}\r\n[{\"c\":3}]\n{\"tail\":true}";

    #[test]
    fn same_messages_byte_by_byte_in_one_chunk_and_random_splits() {
        let expected = vec![r#"{"a":1}"#, r#"{"b":"é"}"#, r#"[{"c":3}]"#, r#"{"tail":true}"#];
        assert_eq!(messages(&decode_in_chunks(NdjsonCodec::new(1024), INPUT, &[1])), expected);
        assert_eq!(messages(&decode_in_chunks(NdjsonCodec::new(1024), INPUT, &[INPUT.len()])), expected);
        for seed in 1..50 {
            let chunks = random_chunks(seed, 64, 9);
            assert_eq!(messages(&decode_in_chunks(NdjsonCodec::new(1024), INPUT, &chunks)), expected, "seed {seed}");
        }
    }

    #[test]
    fn oversized_line_is_reported_once_and_skipped() {
        let mut input = b"{\"first\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend_from_slice(b"\n{\"after\":2}\n");
        for chunks in [&[1usize][..], &[input.len()], &random_chunks(7, 100, 300)] {
            let frames = decode_in_chunks(NdjsonCodec::new(100), &input, chunks);
            assert_eq!(messages(&frames), vec![r#"{"first":1}"#, "TooLarge(None)", r#"{"after":2}"#]);
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
            assert_eq!(messages(&decode_in_chunks(NdjsonCodec::new(100), &input, chunks)), vec![line.clone()]);
        }
        // One byte more is too large, cut anywhere, and so is an unfinished line at the end.
        let mut long = vec![b'y'; 101];
        long.extend_from_slice(b"\r\n");
        for chunks in [&[101usize, 1][..], &[102, 1], &[long.len()], &[1]] {
            assert_eq!(messages(&decode_in_chunks(NdjsonCodec::new(100), &long, chunks)), vec!["TooLarge(None)"]);
        }
        assert_eq!(messages(&decode_in_chunks(NdjsonCodec::new(100), &long[..101], &[1])), vec!["TooLarge(None)"]);
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
