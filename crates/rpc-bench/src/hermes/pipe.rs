//! stdin and stdout as a pipe of Content-Length frames, read and written
//! without buffering, and `rpc-bench content-length-echo`, B6's baseline,
//! which sends every byte back unread.
//!
//! The extension's loop must cost less a message than the echo does, or the
//! baseline measures the extension: frames are read where the pipe put them
//! (no copy out of a read chunk), the usual head is read without a search,
//! and the searches that remain are built once.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::LazyLock;

use anyhow::{Context, Result};
use memchr::memmem::Finder;
use rpc_core::codec::content_length::usual_head;

use crate::pin;

/// stdin and stdout as plain files: unbuffered, so one write is one write(2)
/// (std's stdout would cut each frame at its header's newline).
pub(super) struct Pipe {
    input: File,
    output: File,
    pub(super) inbox: Inbox,
}

impl Pipe {
    pub(super) fn stdio() -> Result<Pipe> {
        let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        let output = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        Ok(Pipe { input, output, inbox: Inbox::new() })
    }

    /// Reads what is there (at least a byte); false at end of input.
    pub(super) fn fill(&mut self) -> Result<bool> {
        Ok(self.inbox.read_from(&mut self.input)? > 0)
    }

    pub(super) fn send(&mut self, out: &[u8]) -> Result<()> {
        if !out.is_empty() {
            self.output.write_all(out)?;
        }
        Ok(())
    }
}

/// What has been read and not yet taken: `buf[start..end]`. The buffer is
/// initialised once and read into in place; the unfinished frame at its end
/// moves to the front only when a read would find no room.
pub(super) struct Inbox {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// The room a read gets at least.
const READ_ROOM: usize = 64 * 1024;

impl Inbox {
    pub(super) fn new() -> Inbox {
        Inbox { buf: vec![0; 4 * READ_ROOM], start: 0, end: 0 }
    }

    fn read_from(&mut self, input: &mut impl Read) -> io::Result<usize> {
        if self.buf.len() - self.end < READ_ROOM {
            self.buf.copy_within(self.start..self.end, 0);
            (self.end, self.start) = (self.end - self.start, 0);
            if self.buf.len() - self.end < READ_ROOM {
                // One frame larger than the buffer: it grows to hold it.
                self.buf.resize(self.end + 4 * READ_ROOM, 0);
            }
        }
        let n = input.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    #[cfg(test)]
    fn extend(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        while !bytes.is_empty() {
            self.read_from(&mut bytes).unwrap();
        }
    }

    /// Calls `each` with the body of every complete frame read, then drops them.
    pub(super) fn take_frames(&mut self, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        while let Some((body, length)) = frame_at(&self.buf[self.start..self.end])? {
            let at = self.start + body;
            self.start = at + length;
            each(&self.buf[at..at + length])?;
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        Ok(())
    }
}

/// Where the body of the frame at the front of `rest` starts and how long it
/// is, once the whole frame is there. The usual head, as every peer here
/// writes it, is read without a search (as the host's own framing reads it).
fn frame_at(rest: &[u8]) -> Result<Option<(usize, usize)>> {
    static HEAD_END: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\r\n\r\n"));
    let (length, body) = match usual_head(rest) {
        Some(found) => found,
        None => {
            let Some(end) = HEAD_END.find(rest) else { return Ok(None) };
            (content_length(&rest[..end]).context("a frame without Content-Length")?, end + 4)
        }
    };
    Ok((rest.len() >= body + length).then_some((body, length)))
}

fn content_length(headers: &[u8]) -> Option<usize> {
    headers.split(|&b| b == b'\n').find_map(|line| {
        let (key, value) = std::str::from_utf8(line).ok()?.split_once(':')?;
        if key.trim().eq_ignore_ascii_case("content-length") { value.trim().parse().ok() } else { None }
    })
}

pub(super) fn frame(out: &mut Vec<u8>, body: &str) {
    let _ = write!(out, "Content-Length: {}\r\n\r\n{body}", body.len());
}

/// `rpc-bench content-length-echo`: B6's baseline, every byte of stdin back
/// on stdout, unread.
pub fn echo(cpu: Option<usize>) -> Result<()> {
    if let Some(cpu) = cpu {
        pin::pin_current_thread(cpu)?;
    }
    let mut pipe = Pipe::stdio()?;
    let mut chunk = vec![0; 256 * 1024];
    loop {
        let n = pipe.input.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        pipe.output.write_all(&chunk[..n])?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_a_partial_one_stays() {
        let mut written = Vec::new();
        frame(&mut written, r#"{"id":1}"#);
        written.extend_from_slice(b"content-length: 8\r\n\r\n{\"id\":2}Content-Length: 8\r\n\r\n{\"id");
        let mut inbox = Inbox::new();
        inbox.extend(&written);
        let mut bodies = Vec::new();
        let mut take = |inbox: &mut Inbox| {
            inbox
                .take_frames(|body| {
                    bodies.push(body.to_vec());
                    Ok(())
                })
                .unwrap()
        };
        take(&mut inbox);
        inbox.extend(b"\":3}");
        take(&mut inbox);
        assert_eq!(bodies, [&b"{\"id\":1}"[..], b"{\"id\":2}", b"{\"id\":3}"]);
        assert_eq!(inbox.start, inbox.end, "nothing left over");
    }

    #[test]
    fn frames_larger_than_the_buffer_and_heads_cut_anywhere_are_read_whole() {
        let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(5 * READ_ROOM));
        let mut written = Vec::new();
        for _ in 0..3 {
            frame(&mut written, &body);
            frame(&mut written, r#"{"id":7}"#);
        }
        let mut inbox = Inbox::new();
        let mut bodies = Vec::new();
        // Fed in pieces of every size up to 40 bytes: heads split at every byte.
        let mut rest = &written[..];
        let mut size = 1;
        while !rest.is_empty() {
            let n = size.min(rest.len());
            inbox.extend(&rest[..n]);
            rest = &rest[n..];
            size = size % 40 + 1;
            inbox
                .take_frames(|b| {
                    bodies.push(b.len());
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(bodies, [body.len(), 8, body.len(), 8, body.len(), 8]);
    }
}
