//! stdin and stdout as a pipe of Content-Length frames, read and written
//! without buffering, and `rpc-bench content-length-echo`, B6's baseline,
//! which sends every byte back unread.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;

use anyhow::{Context, Result};

use crate::pin;

/// stdin and stdout as plain files: unbuffered, so one write is one write(2)
/// (std's stdout would cut each frame at its header's newline).
pub(super) struct Pipe {
    input: File,
    output: File,
    pub(super) buf: Vec<u8>,
    chunk: Box<[u8]>,
}

impl Pipe {
    pub(super) fn stdio() -> Result<Pipe> {
        let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        let output = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        Ok(Pipe { input, output, buf: Vec::with_capacity(256 * 1024), chunk: vec![0; 256 * 1024].into() })
    }

    /// Reads what is there (at least a byte); false at end of input.
    pub(super) fn fill(&mut self) -> Result<bool> {
        let n = self.input.read(&mut self.chunk)?;
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(n > 0)
    }

    pub(super) fn send(&mut self, out: &[u8]) -> Result<()> {
        if !out.is_empty() {
            self.output.write_all(out)?;
        }
        Ok(())
    }
}

/// Calls `each` with the body of every complete frame at the front of `buf`,
/// then removes them.
pub(super) fn take_frames(buf: &mut Vec<u8>, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        let Some(end) = memchr::memmem::find(rest, b"\r\n\r\n") else { break };
        let length = content_length(&rest[..end]).context("a frame without Content-Length")?;
        let body = end + 4;
        if rest.len() < body + length {
            break;
        }
        each(&rest[body..body + length])?;
        at += body + length;
    }
    buf.drain(..at);
    Ok(())
}

fn content_length(headers: &[u8]) -> Option<usize> {
    // The usual head, as every peer here writes it, read without a search.
    if let Some(digits) = headers.strip_prefix(b"Content-Length: ")
        && !digits.is_empty()
        && digits.len() <= 12
        && digits.iter().all(u8::is_ascii_digit)
    {
        return Some(digits.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')));
    }
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
    loop {
        let n = pipe.input.read(&mut pipe.chunk)?;
        if n == 0 {
            return Ok(());
        }
        pipe.output.write_all(&pipe.chunk[..n])?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_a_partial_one_stays() {
        let mut buf = Vec::new();
        frame(&mut buf, r#"{"id":1}"#);
        buf.extend_from_slice(b"content-length: 8\r\n\r\n{\"id\":2}Content-Length: 8\r\n\r\n{\"id");
        let mut bodies = Vec::new();
        take_frames(&mut buf, |body| {
            bodies.push(body.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(bodies, [b"{\"id\":1}".to_vec(), b"{\"id\":2}".to_vec()]);
        assert_eq!(buf, b"Content-Length: 8\r\n\r\n{\"id");
    }
}
