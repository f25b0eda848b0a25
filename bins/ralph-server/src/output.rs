//! The agent's terminal output as lines: split as it arrives, so each line
//! is an event the moment its newline does (and a line still being written,
//! a prompt or typed keys, once the terminal has been quiet for a moment);
//! and what the loop watches in it: the completion marker, the echo of the
//! prompt, and rate-limit or overload messages.

use std::collections::HashMap;

use regex::Regex;

/// Longest line held before it is passed on anyway: a peer-controlled
/// buffer (the agent never writing a newline) stays bounded.
pub const LONGEST_LINE: usize = 64 * 1024;

/// One piece of output to publish.
#[derive(Debug, PartialEq)]
pub enum Piece {
    /// The rest of a line that ended: `text` is what was not published yet,
    /// `whole` the line from its start (for recent_output and the checks).
    Line { text: String, whole: String },
    /// [`LONGEST_LINE`] bytes of a line that goes on: published as partial
    /// (the rest follows), but kept and checked as a line of its own, so
    /// that memory stays bounded.
    Cut { text: String, whole: String },
    /// The start of a line still being written.
    Partial(String),
}

/// Splits terminal output into lines. Holds at most one line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    line: Vec<u8>,
    /// Bytes of `line` already published as partial pieces.
    published: usize,
}

impl LineSplitter {
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Piece>) {
        while !chunk.is_empty() {
            let newline = memchr::memchr(b'\n', chunk);
            let end = newline.unwrap_or(chunk.len());
            let room = LONGEST_LINE - self.line.len();
            let take = end.min(room);
            self.line.extend_from_slice(&chunk[..take]);
            if take < end {
                // Too long: pass it on as a piece of its own and go on. A
                // character cut at the limit starts the next piece instead.
                let carry = self.line.split_off(self.line.len() - incomplete_suffix(&self.line));
                let Piece::Line { text, whole } = self.end_line() else { unreachable!("end_line makes lines") };
                out.push(Piece::Cut { text, whole });
                self.line = carry;
                chunk = &chunk[take..];
                continue;
            }
            chunk = &chunk[end..];
            if newline.is_some() {
                out.push(self.end_line());
                chunk = &chunk[1..];
            }
        }
    }

    /// The unpublished part of the line being written, if any.
    pub fn flush_partial(&mut self) -> Option<Piece> {
        // A character cut by the last read waits for its other bytes:
        // published in two pieces it would show as two U+FFFD.
        let end = self.line.len() - incomplete_suffix(&self.line[self.published..]);
        if end == self.published {
            return None;
        }
        let text = String::from_utf8_lossy(&self.line[self.published..end]).into_owned();
        self.published = end;
        Some(Piece::Partial(text))
    }

    /// What of the line being written has been published as partial pieces.
    pub fn published(&self) -> String {
        String::from_utf8_lossy(&self.line[..self.published]).into_owned()
    }

    /// Whatever is left when the output ends.
    pub fn finish(&mut self) -> Option<Piece> {
        (!self.line.is_empty()).then(|| self.end_line())
    }

    fn end_line(&mut self) -> Piece {
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        let text = String::from_utf8_lossy(&line[self.published.min(line.len())..]).into_owned();
        let whole = String::from_utf8_lossy(line).into_owned();
        self.line.clear();
        self.published = 0;
        Piece::Line { text, whole }
    }
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 character
/// whose other bytes have not arrived yet (0 to 3).
fn incomplete_suffix(bytes: &[u8]) -> usize {
    let tail = &bytes[bytes.len().saturating_sub(3)..];
    // The last byte that is not a continuation byte: where such a character starts.
    let Some(start) = tail.iter().rposition(|&b| b & 0xC0 != 0x80) else { return 0 };
    match std::str::from_utf8(&tail[start..]) {
        Err(e) if e.error_len().is_none() => tail.len() - start,
        _ => 0,
    }
}

/// A line as a person would read it: escape sequences removed, and of text
/// overwritten after a carriage return only what the terminal shows last.
pub fn plain(line: &str) -> String {
    // Split first: the stripper drops carriage returns with the other controls.
    line.rsplit('\r')
        .map(|part| String::from_utf8_lossy(&strip_ansi_escapes::strip(part.as_bytes())).into_owned())
        .find(|part| !part.is_empty())
        .unwrap_or_default()
}

/// `<promise>COMPLETE</promise>`, any case, spaces allowed inside the tags.
pub fn completion_marker() -> Regex {
    Regex::new(r"(?i)<\s*promise\s*>\s*complete\s*<\s*/\s*promise\s*>").expect("a valid pattern")
}

/// Default for `--failure-pattern`: what agents print when their API refuses.
pub const DEFAULT_FAILURE_PATTERN: &str =
    r"(?i)rate[ _-]?limit(ed)?\b|\boverloaded\b|too many requests|quota exceeded|usage limit reached";

/// What one iteration's output showed.
#[derive(Debug, Default)]
pub struct Findings {
    /// The agent claimed completion (outside interactive mode, not an echo).
    pub claimed: bool,
    /// Lines that were not an echo of the prompt.
    pub own_lines: usize,
    /// The first line that matched a failure pattern.
    pub failure: Option<String>,
}

/// Watches one iteration's lines.
#[derive(Debug)]
pub struct OutputWatch {
    marker: Regex,
    failure: Regex,
    /// Lines of the prompt, and how many more times each may come back as
    /// an echo (the terminal echoes a prompt written to stdin; some agents
    /// print theirs).
    echoes: HashMap<String, usize>,
    pub findings: Findings,
}

impl OutputWatch {
    pub fn new(prompt: &str, marker: Regex, failure: Regex) -> OutputWatch {
        let mut watch = OutputWatch { marker, failure, echoes: HashMap::new(), findings: Findings::default() };
        watch.expect_echo(prompt);
        watch
    }

    /// Text the terminal will echo besides the prompt (a prompt typed in its
    /// place): never the agent's own lines either.
    pub fn expect_echo(&mut self, text: &str) {
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            *self.echoes.entry(line.to_owned()).or_insert(0) += 1;
        }
    }

    /// Looks at one whole line (plain text). Returns whether it claims completion.
    pub fn line(&mut self, plain: &str, interactive: bool) -> bool {
        let text = plain.trim();
        if text.is_empty() {
            return false;
        }
        // A line of the prompt seen again is its echo, as many times as the
        // prompt has it: the marker the prompt mentions never counts.
        if let Some(left) = self.echoes.get_mut(text).filter(|n| **n > 0) {
            *left -= 1;
            return false;
        }
        self.findings.own_lines += 1;
        if self.findings.failure.is_none() && self.failure.is_match(text) {
            self.findings.failure = Some(text.to_owned());
        }
        if !interactive && self.marker.is_match(text) {
            self.findings.claimed = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, whole: &str) -> Piece {
        Piece::Line { text: text.into(), whole: whole.into() }
    }

    #[test]
    fn lines_split_across_chunks_and_partials_are_published_once() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        s.feed(b"one\r\ntw", &mut out);
        assert_eq!(out, [line("one", "one")]);
        assert_eq!(s.flush_partial(), Some(Piece::Partial("tw".into())));
        assert_eq!(s.flush_partial(), None);
        out.clear();
        s.feed(b"o\nthree", &mut out);
        assert_eq!(out, [line("o", "two")]);
        assert_eq!(s.finish(), Some(line("three", "three")));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn an_endless_line_is_cut_and_memory_stays_bounded() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        s.feed(&vec![b'x'; LONGEST_LINE * 2 + 10], &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|piece| matches!(piece, Piece::Cut { .. })), "the line goes on");
        assert!(s.line.len() <= LONGEST_LINE);
        out.clear();
        s.feed(b"end\n", &mut out);
        assert_eq!(out, [line("xxxxxxxxxxend", "xxxxxxxxxxend")]);
    }

    /// Found by the agent_output fuzz target: a character split between two
    /// reads, with the terminal quiet in between, was published as two
    /// U+FFFD partials instead of itself.
    #[test]
    fn a_character_cut_by_a_read_is_published_whole() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        s.feed(b"Zo\xc3", &mut out);
        assert_eq!(s.flush_partial(), Some(Piece::Partial("Zo".into())));
        assert_eq!(s.flush_partial(), None);
        s.feed(b"\xab \xe6\x9d", &mut out);
        assert_eq!(s.flush_partial(), Some(Piece::Partial("\u{eb} ".into())));
        s.feed(b"\x8e\n", &mut out);
        assert_eq!(out, [line("\u{674e}", "Zo\u{eb} \u{674e}")]);
        // Bytes that can never be a character are not held back.
        s.feed(b"\xff\x80", &mut out);
        assert_eq!(s.flush_partial(), Some(Piece::Partial("\u{fffd}\u{fffd}".into())));
    }

    #[test]
    fn a_character_at_the_length_limit_starts_the_next_line() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        let mut input = vec![b'x'; LONGEST_LINE - 1];
        input.extend_from_slice("\u{674e}tail\n".as_bytes());
        s.feed(&input, &mut out);
        assert_eq!(out.len(), 2);
        let Piece::Cut { whole, .. } = &out[0] else { panic!() };
        assert_eq!(whole.len(), LONGEST_LINE - 1);
        assert_eq!(out[1], line("\u{674e}tail", "\u{674e}tail"));
    }

    #[test]
    fn plain_text_drops_escapes_and_overwritten_text() {
        assert_eq!(plain("\x1b[1;32mgreen\x1b[0m done"), "green done");
        assert_eq!(plain("10%\r50%\r100%"), "100%");
        assert_eq!(plain("\x1b]0;title\x07text"), "text");
    }

    #[test]
    fn the_marker_counts_once_the_prompts_echo_is_used_up_and_never_in_interactive_mode() {
        let prompt = "Do the work.\nWhen done, reply with <promise>COMPLETE</promise>.\n";
        let mut watch = OutputWatch::new(prompt, completion_marker(), Regex::new(DEFAULT_FAILURE_PATTERN).unwrap());
        assert!(!watch.line("Do the work.", false));
        assert!(!watch.line("When done, reply with <promise>COMPLETE</promise>.", false));
        assert_eq!(watch.findings.own_lines, 0);
        assert!(!watch.line("< PROMISE >complete</promise>", true), "interactive mode");
        assert!(watch.line("all done: < PROMISE >complete</ promise >", false));
        assert!(watch.findings.claimed);
    }

    #[test]
    fn rate_limits_and_overloads_are_failures() {
        let mut watch = OutputWatch::new("", completion_marker(), Regex::new(DEFAULT_FAILURE_PATTERN).unwrap());
        watch.line("compiling", false);
        assert!(watch.findings.failure.is_none());
        watch.line("Error: API Overloaded, try later", false);
        assert_eq!(watch.findings.failure.as_deref(), Some("Error: API Overloaded, try later"));
    }
}
