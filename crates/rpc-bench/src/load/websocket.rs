//! The WebSocket wire by hand, for the counting client: the opening
//! handshake, a client's text frame, and a walk over the server's frames.
//! A library's per-message `Message` (an allocation and a copy each way)
//! would cost the load side more than a raw echo costs its server.

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connects to `url` (`ws://host:port/path?query`) and upgrades; returns the
/// stream and whatever the server sent after its response head.
pub(super) async fn connect(url: &str) -> Result<(TcpStream, Vec<u8>)> {
    let rest = url.strip_prefix("ws://").context("a WebSocket URL starts with ws://")?;
    let (host, path) = rest.find('/').map_or((rest, "/"), |at| (&rest[..at], &rest[at..]));
    let mut stream = TcpStream::connect(host).await.with_context(|| format!("connecting to {host}"))?;
    stream.set_nodelay(true)?;
    // The key is the RFC's example: the server's answer to it is not checked.
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("{url} closed the connection during the handshake");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            break at + 4;
        }
    };
    let status = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    if !status.starts_with(b"HTTP/1.1 101") {
        bail!("{url} refused the upgrade: {}", String::from_utf8_lossy(status).trim_end());
    }
    Ok((stream, buf.split_off(end)))
}

/// Appends a client's text frame holding `payload`. Client frames must be
/// masked; the mask key is zero, which leaves the payload as it is (a
/// server may not refuse a key, and a benchmark has no proxy to confuse).
pub(super) fn push_text_frame(out: &mut Vec<u8>, payload: &[u8]) {
    push_frame(out, 0x1, payload);
}

/// A pong answering a server's ping.
pub(super) fn push_pong_frame(out: &mut Vec<u8>, payload: &[u8]) {
    push_frame(out, 0xA, payload);
}

fn push_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    out.push(0x80 | opcode);
    match payload.len() {
        len @ 0..126 => out.push(0x80 | len as u8),
        len @ 126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(payload);
}

/// What the complete frames at the front of a buffer hold.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Frames {
    /// Bytes of the complete frames: the rest is a frame not yet whole.
    pub(super) end: usize,
    /// Data messages ended (a final text, binary or continuation frame).
    pub(super) messages: usize,
    /// The server sent a close frame.
    pub(super) closed: bool,
    /// Payloads (start, end) of the server's pings, to be answered.
    pub(super) pings: Vec<(usize, usize)>,
}

/// Walks the complete frames at the front of `buf`: a header's few bytes a
/// frame, the payload skipped.
pub(super) fn walk(buf: &[u8]) -> Frames {
    let mut frames = Frames::default();
    let mut at = 0;
    while let [b0, b1, ..] = buf[at..] {
        let (len, mut header) = match b1 & 0x7F {
            126 if buf.len() >= at + 4 => (u16::from_be_bytes([buf[at + 2], buf[at + 3]]) as usize, 4),
            127 if buf.len() >= at + 10 => {
                let bytes: [u8; 8] = buf[at + 2..at + 10].try_into().unwrap();
                (u64::from_be_bytes(bytes) as usize, 10)
            }
            126 | 127 => break,
            len => (len as usize, 2),
        };
        if b1 & 0x80 != 0 {
            header += 4;
        }
        let Some(end) = (at + header).checked_add(len).filter(|&end| end <= buf.len()) else { break };
        match b0 & 0x0F {
            0x0..=0x2 if b0 & 0x80 != 0 => frames.messages += 1,
            0x8 => frames.closed = true,
            0x9 => frames.pings.push((at + header, end)),
            _ => {}
        }
        at = end;
    }
    frames.end = at;
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's frame (unmasked) with `opcode` and a payload of `len` bytes.
    fn server_frame(out: &mut Vec<u8>, fin_opcode: u8, len: usize) {
        out.push(fin_opcode);
        if len < 126 {
            out.push(len as u8);
        } else {
            out.push(126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        out.extend(std::iter::repeat_n(b'x', len));
    }

    #[test]
    fn whole_messages_are_counted_and_a_partial_frame_is_left() {
        let mut buf = Vec::new();
        server_frame(&mut buf, 0x81, 40);
        server_frame(&mut buf, 0x01, 10); // a first fragment: no message yet
        server_frame(&mut buf, 0x80, 10); // its final continuation
        server_frame(&mut buf, 0x89, 3); // a ping
        server_frame(&mut buf, 0x81, 300);
        let whole = buf.len();
        server_frame(&mut buf, 0x81, 200);
        buf.truncate(whole + 100);
        let frames = walk(&buf);
        assert_eq!((frames.end, frames.messages, frames.closed), (whole, 3, false));
        assert_eq!(frames.pings.len(), 1);
        let (from, to) = frames.pings[0];
        assert_eq!(&buf[from..to], b"xxx");
        assert_eq!(walk(&buf[..1]), Frames::default());
        let mut close = Vec::new();
        server_frame(&mut close, 0x88, 2);
        assert!(walk(&close).closed);
    }

    #[test]
    fn client_frames_are_masked_with_a_zero_key_and_read_back_whole() {
        for len in [0, 125, 126, 70_000] {
            let payload = vec![b'a'; len];
            let mut out = Vec::new();
            push_text_frame(&mut out, &payload);
            assert_eq!(out[0], 0x81);
            assert_ne!(out[1] & 0x80, 0, "masked");
            assert!(out.ends_with(&payload));
            let frames = walk(&out);
            assert_eq!((frames.end, frames.messages), (out.len(), 1));
        }
    }
}
