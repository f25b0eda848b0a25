//! The framing on an extension's pipes: rpc-core's Content-Length codec,
//! with every JSON text the host writes made pure ASCII (`ü` is sent as
//! `\u00fc`, `🚑` as the pair `\ud83d\ude91`).
//!
//! Content-Length counts bytes. Hermes' own test extensions (and the
//! examples people copy) read the body with Python's text-mode
//! `sys.stdin.read(length)`, which counts *characters*: one non-ASCII
//! character in a message and they read into the next frame, then fail or
//! hang. With ASCII-only JSON the two counts agree, so they work unchanged,
//! and every JSON parser decodes the escapes to the same text. What
//! extensions send is read as UTF-8 either way.

use std::fmt::Write as _;
use std::io;

use bytes::{Bytes, BytesMut};
use rpc_core::codec::{ContentLengthCodec, EncodeJson, Frame, Outbound};
use tokio_util::codec::{Decoder, Encoder};

#[derive(Clone, Debug)]
pub struct AsciiContentLength {
    inner: ContentLengthCodec,
}

impl AsciiContentLength {
    pub fn new(max_body: usize) -> AsciiContentLength {
        AsciiContentLength { inner: ContentLengthCodec::new(max_body) }
    }
}

impl Decoder for AsciiContentLength {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        self.inner.decode(buf)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        self.inner.decode_eof(buf)
    }
}

impl Encoder<Outbound> for AsciiContentLength {
    type Error = io::Error;

    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> io::Result<()> {
        match item {
            Outbound::Message { json, .. } => Self::encode_json(&json, dst),
            other => self.inner.encode(other, dst),
        }
    }
}

impl EncodeJson for AsciiContentLength {
    fn encode_json(json: &[u8], dst: &mut BytesMut) -> io::Result<()> {
        if json.is_ascii() {
            return ContentLengthCodec::encode_json(json, dst);
        }
        ContentLengthCodec::encode_json(&escape_non_ascii(json)?, dst)
    }
}

/// Rewrites every non-ASCII character of a serialised JSON text as a
/// `\uXXXX` escape. Outside strings JSON is ASCII, and a backslash escape
/// is followed by ASCII, so each non-ASCII character sits plainly inside a
/// string, where its escape means the same.
pub fn escape_non_ascii(json: &[u8]) -> io::Result<Bytes> {
    let text = std::str::from_utf8(json).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let extra = json.iter().filter(|b| !b.is_ascii()).count() * 4;
    let mut out = String::with_capacity(json.len() + extra);
    let mut units = [0u16; 2];
    let mut plain = 0;
    for (at, c) in text.char_indices().filter(|(_, c)| !c.is_ascii()) {
        out.push_str(&text[plain..at]);
        for unit in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{unit:04x}");
        }
        plain = at + c.len_utf8();
    }
    out.push_str(&text[plain..]);
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc_core::message::Kind;

    #[test]
    fn non_ascii_is_escaped_and_means_the_same() {
        let value = serde_json::json!({"message": "Müller^Zoë^李雷 🚑\r\\\"", "n": 1});
        let json = serde_json::to_vec(&value).unwrap();
        let escaped = escape_non_ascii(&json).unwrap();
        assert!(escaped.is_ascii());
        assert!(std::str::from_utf8(&escaped).unwrap().contains(r"M\u00fcller^Zo\u00eb^\u674e\u96f7 \ud83d\ude91"));
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&escaped).unwrap(), value);
    }

    #[test]
    fn frames_count_bytes_which_are_characters() {
        let mut codec = AsciiContentLength::new(1 << 20);
        let mut out = BytesMut::new();
        let json = serde_json::to_vec(&serde_json::json!({"m": "ÄÖÜ"})).unwrap();
        codec.encode(Outbound::message(Kind::Notification, json), &mut out).unwrap();
        assert_eq!(&out[..], b"Content-Length: 26\r\n\r\n{\"m\":\"\\u00c4\\u00d6\\u00dc\"}");
        // Reading is rpc-core's, untouched: UTF-8 bodies by byte count.
        let mut input = BytesMut::from(&b"Content-Length: 10\r\n\r\n{\"m\":\"\xc3\xa4\"}"[..]);
        assert_eq!(
            codec.decode(&mut input).unwrap(),
            Some(Frame::Message(Bytes::from_static(b"{\"m\":\"\xc3\xa4\"}")))
        );
    }
}
