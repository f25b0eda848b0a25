//! What a child writes to stderr: read line by line into a bounded ring
//! ([`LineRing`]) and the log.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;

/// Longest line a [`LineRing`] keeps whole: a runaway line (a binary blob, a
/// progress bar without newlines) must not push out the lines before it.
pub const LONGEST_LINE: usize = 8 * 1024;

/// The last lines a child wrote, bounded in count and in bytes. A cheap
/// handle: clones share the lines, so a daemon can keep the ring of a child
/// that has gone (to say why it crashed).
#[derive(Clone, Debug)]
pub struct LineRing {
    shared: Arc<Mutex<Ring>>,
}

#[derive(Debug)]
struct Ring {
    lines: VecDeque<String>,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
    /// The line being written, as far as it is known (see [`LineRing::set_partial`]).
    partial: Option<String>,
}

impl LineRing {
    /// Keeps at most `max_lines` lines totalling at most `max_bytes` bytes.
    pub fn new(max_lines: usize, max_bytes: usize) -> LineRing {
        let ring = Ring { lines: VecDeque::new(), bytes: 0, max_lines, max_bytes, partial: None };
        LineRing { shared: Arc::new(Mutex::new(ring)) }
    }

    /// Adds a line (without its newline), dropping the oldest to stay within
    /// both limits. A line longer than [`LONGEST_LINE`] (or `max_bytes`, if
    /// less) is cut and ends in `…`.
    pub fn push(&self, line: &str) {
        let mut ring = self.shared.lock();
        ring.partial = None;
        let line = cut(line, ring.longest_line());
        while !ring.lines.is_empty() && (ring.lines.len() >= ring.max_lines || ring.bytes + line.len() > ring.max_bytes)
        {
            let old = ring.lines.pop_front().unwrap_or_default();
            ring.bytes -= old.len();
        }
        if ring.max_lines > 0 {
            ring.bytes += line.len();
            ring.lines.push_back(line);
        }
    }

    /// The line being written so far (a prompt waiting for its answer): the
    /// last of [`LineRing::tail`], cut as [`LineRing::push`] cuts, until
    /// `push` adds the whole line. Held beside the lines: one line more at most.
    pub fn set_partial(&self, line: &str) {
        let mut ring = self.shared.lock();
        ring.partial = Some(cut(line, ring.longest_line()));
    }

    /// The last `n` lines, oldest first, the line being written last.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let ring = self.shared.lock();
        let whole = n.saturating_sub(usize::from(ring.partial.is_some()));
        let lines = ring.lines.iter().skip(ring.lines.len().saturating_sub(whole)).cloned();
        lines.chain(ring.partial.clone().filter(|_| n > 0)).collect()
    }

    /// Bytes held (lines without their newlines).
    pub fn bytes(&self) -> usize {
        self.shared.lock().bytes
    }

    fn longest_line(&self) -> usize {
        self.shared.lock().longest_line()
    }
}

impl Ring {
    fn longest_line(&self) -> usize {
        self.max_bytes.min(LONGEST_LINE)
    }
}

/// `line` within `max` bytes, cut at a character boundary with a `…` mark.
fn cut(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_owned();
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    if max < MARK.len() { String::new() } else { format!("{}{MARK}", &line[..end]) }
}

/// Reads stderr until EOF, a line at a time, into the ring and the log. Holds
/// at most one line (up to the ring's longest) in memory: the rest of a longer
/// line is skipped.
pub(super) async fn read_lines(mut pipe: ChildStderr, ring: LineRing, name: String, level: tracing::Level) {
    // One byte more than a line may hold, so that the ring sees the line is too
    // long and marks it cut.
    let longest = ring.longest_line().saturating_add(1);
    let mut line: Vec<u8> = Vec::new();
    let mut skipping = false;
    let mut buf = vec![0u8; 8192];
    let emit = |line: &[u8]| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        log_line(level, &name, &text);
        ring.push(&text);
    };
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(child = %name, error = %e, "reading stderr failed");
                break;
            }
        };
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let newline = memchr::memchr(b'\n', rest);
            let piece = &rest[..newline.unwrap_or(rest.len())];
            rest = &rest[newline.map_or(rest.len(), |i| i + 1)..];
            if !skipping {
                let room = longest - line.len();
                line.extend_from_slice(&piece[..piece.len().min(room)]);
                if line.len() == longest {
                    emit(&line);
                    line.clear();
                    skipping = true;
                }
            }
            if newline.is_some() {
                if !skipping {
                    emit(&line);
                }
                line.clear();
                skipping = false;
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

fn log_line(level: tracing::Level, child: &str, line: &str) {
    use tracing::Level;
    match level {
        Level::ERROR => tracing::error!(child, "{line}"),
        Level::WARN => tracing::warn!(child, "{line}"),
        Level::INFO => tracing::info!(child, "{line}"),
        Level::DEBUG => tracing::debug!(child, "{line}"),
        Level::TRACE => tracing::trace!(child, "{line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_lines_within_both_limits() {
        let ring = LineRing::new(3, 10);
        for line in ["a", "bb", "ccc", "dddd"] {
            ring.push(line);
        }
        assert_eq!(ring.tail(10), ["bb", "ccc", "dddd"]);
        ring.push("eeeeeee");
        assert_eq!(ring.tail(10), ["eeeeeee"]);
        assert_eq!(ring.bytes(), 7);
        ring.push("ünïcödé-and-more");
        let last = ring.tail(1).remove(0);
        assert!(last.len() <= 10 && last.ends_with('…'), "{last}");
        assert!(ring.bytes() <= 10);
    }

    #[test]
    fn the_line_being_written_comes_last_until_it_is_pushed_whole() {
        let ring = LineRing::new(3, 100);
        for line in ["a", "b", "c"] {
            ring.push(line);
        }
        ring.set_partial("your input: ");
        assert_eq!(ring.tail(3), ["b", "c", "your input: "]);
        assert_eq!(ring.tail(0), Vec::<String>::new());
        ring.push("your input: yes");
        assert_eq!(ring.tail(3), ["b", "c", "your input: yes"]);
        ring.set_partial(&"x".repeat(200));
        let last = ring.tail(1).remove(0);
        assert!(last.len() <= 100 && last.ends_with('…'), "{last}");
    }
}
