//! The runtime's console: everything Ruby prints outside an evaluation (at
//! start-up, from background threads, from `at_exit` handlers), plus the
//! daemon's own markers for starts and exits.
//!
//! Kept twice: the last lines in memory for the `console_log` tool (at most
//! [`KEPT_LINES`] and [`KEPT_BYTES`]: a background thread printing long lines
//! must not fill the daemon's memory), and all of it appended to `console.log`
//! in the log directory (rotated once at 10 MiB to `console.log.1`), so it
//! survives the daemon.

use parking_lot::Mutex;

use crate::json_size::json_string_len;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Lines kept in memory, and the bytes they may take: the oldest go first.
/// 10 000 lines of [`LONGEST_LINE`] would be 640 MiB.
const KEPT_LINES: usize = 10_000;
pub const KEPT_BYTES: usize = 4 * 1024 * 1024;
/// A line longer than this is cut into pieces (a runaway `print` without newlines).
const LONGEST_LINE: usize = 64 * 1024;
/// Size at which `console.log` is rotated.
const ROTATE_AT: u64 = 10 * 1024 * 1024;

#[derive(Debug)]
pub struct ConsoleLog {
    lines: Mutex<Lines>,
    file: Mutex<Option<LogFile>>,
    path: Option<PathBuf>,
}

/// The kept lines, and how many were ever pushed (so a caller can ask for
/// "everything since" a point).
#[derive(Debug, Default)]
struct Lines {
    kept: VecDeque<String>,
    /// The bytes of the kept lines.
    bytes: usize,
    pushed: u64,
}

/// The newest lines that fit a reply ([`ConsoleLog::tail_within`]).
#[derive(Debug, Default, PartialEq)]
pub struct Tail {
    /// Oldest first.
    pub lines: Vec<String>,
    /// Lines asked for (and kept) that did not fit.
    pub left_out: usize,
    /// What `lines` take as a JSON array of strings.
    pub json_bytes: usize,
}

#[derive(Debug)]
struct LogFile {
    file: File,
    path: PathBuf,
    size: u64,
}

impl ConsoleLog {
    /// A console that also appends to `<dir>/console.log`. Without a usable
    /// directory it keeps lines in memory only (and says so in the log).
    pub fn new(dir: Option<&Path>) -> ConsoleLog {
        let file = dir.and_then(|dir| match LogFile::open(dir) {
            Ok(file) => Some(file),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot write the runtime console log file; keeping it in memory only");
                None
            }
        });
        ConsoleLog { lines: Mutex::default(), path: file.as_ref().map(|f| f.path.clone()), file: Mutex::new(file) }
    }

    /// Where the console is written, if anywhere.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Adds one line (without its newline).
    pub fn push(&self, line: &str) {
        {
            let mut lines = self.lines.lock();
            while lines.kept.len() >= KEPT_LINES || (lines.bytes + line.len() > KEPT_BYTES && !lines.kept.is_empty()) {
                let dropped = lines.kept.pop_front().map_or(0, |l| l.len());
                lines.bytes -= dropped;
            }
            lines.bytes += line.len();
            lines.kept.push_back(line.to_owned());
            lines.pushed += 1;
        }
        let mut file = self.file.lock();
        if let Some(log) = file.as_mut()
            && let Err(e) = log.append(line)
        {
            tracing::warn!(path = %log.path.display(), error = %e, "writing the console log failed; keeping it in memory only");
            *file = None;
        }
    }

    /// A line of the daemon's own, set apart from what Ruby printed.
    pub fn mark(&self, text: &str) {
        self.push(&format!("-- supex-bridge: {text}"));
    }

    /// The last `n` lines, oldest first (replies take [`ConsoleLog::tail_within`]).
    #[cfg(test)]
    pub fn tail(&self, n: usize) -> Vec<String> {
        let lines = self.lines.lock();
        let kept = &lines.kept;
        kept.iter().skip(kept.len().saturating_sub(n)).cloned().collect()
    }

    /// The last `n` lines, oldest first, as many of the newest as fit in
    /// `max_bytes` written as a JSON array of strings; the rest are counted
    /// in [`Tail::left_out`]. Cheap to call twice: once to measure
    /// (`copy: false`), once to take them.
    pub fn tail_within(&self, n: usize, max_bytes: usize, copy: bool) -> Tail {
        let lines = self.lines.lock();
        let asked = n.min(lines.kept.len());
        let mut tail = Tail { json_bytes: 2, ..Tail::default() };
        let mut fitting = 0;
        for line in lines.kept.iter().rev().take(asked) {
            let cost = json_string_len(line) + usize::from(fitting > 0);
            if tail.json_bytes + cost > max_bytes {
                break;
            }
            tail.json_bytes += cost;
            fitting += 1;
        }
        tail.left_out = asked - fitting;
        if copy {
            tail.lines = lines.kept.iter().skip(lines.kept.len() - fitting).cloned().collect();
        }
        tail
    }

    /// A mark to pass to [`ConsoleLog::since`].
    pub fn seq(&self) -> u64 {
        self.lines.lock().pushed
    }

    /// The lines pushed after `seq` was taken (those still kept).
    pub fn since(&self, seq: u64) -> Vec<String> {
        let lines = self.lines.lock();
        let new = usize::try_from(lines.pushed.saturating_sub(seq)).unwrap_or(usize::MAX);
        let kept = &lines.kept;
        kept.iter().skip(kept.len().saturating_sub(new)).cloned().collect()
    }

    /// Reads `pipe` until EOF, a line at a time, into the console. Blocking:
    /// runs on a thread of its own (one per runtime process).
    pub fn drain(&self, mut pipe: impl Read) {
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "console pipe read failed");
                    break;
                }
            };
            pending.extend_from_slice(&buf[..n]);
            let mut start = 0;
            while let Some(end) = memchr::memchr(b'\n', &pending[start..]).map(|i| start + i) {
                self.push_bytes(&pending[start..end]);
                start = end + 1;
            }
            pending.drain(..start);
            while pending.len() >= LONGEST_LINE {
                let rest = pending.split_off(LONGEST_LINE);
                self.push_bytes(&pending);
                pending = rest;
            }
        }
        if !pending.is_empty() {
            self.push_bytes(&pending);
        }
    }

    fn push_bytes(&self, bytes: &[u8]) {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        self.push(&String::from_utf8_lossy(bytes));
    }
}

impl LogFile {
    fn open(dir: &Path) -> io::Result<LogFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("console.log");
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(LogFile { file, path, size })
    }

    fn append(&mut self, line: &str) -> io::Result<()> {
        if self.size >= ROTATE_AT {
            let old = self.path.with_extension("log.1");
            std::fs::rename(&self.path, &old)?;
            self.file = OpenOptions::new().create(true).append(true).open(&self.path)?;
            self.size = 0;
        }
        let mut record = Vec::with_capacity(line.len() + 1);
        record.extend_from_slice(line.as_bytes());
        record.push(b'\n');
        self.file.write_all(&record)?;
        self.size += record.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_splits_lines_and_keeps_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let console = ConsoleLog::new(Some(dir.path()));
        console.drain(&b"one\ntwo\r\nthree"[..]);
        assert_eq!(console.tail(2), vec!["two", "three"]);
        assert_eq!(console.tail(100).len(), 3);
        let written = std::fs::read_to_string(dir.path().join("console.log")).unwrap();
        assert_eq!(written, "one\ntwo\nthree\n");
    }

    #[test]
    fn endless_lines_are_cut_and_memory_is_bounded() {
        let console = ConsoleLog::new(None);
        let long = vec![b'x'; LONGEST_LINE * 2 + 10];
        console.drain(&long[..]);
        let tail = console.tail(10);
        assert_eq!(tail.len(), 3);
        assert_eq!(tail[0].len(), LONGEST_LINE);
        for i in 0..KEPT_LINES + 5 {
            console.push(&i.to_string());
        }
        assert_eq!(console.tail(usize::MAX).len(), KEPT_LINES);
        assert_eq!(console.tail(1), vec![(KEPT_LINES + 4).to_string()]);
    }

    #[test]
    fn long_lines_are_kept_within_a_byte_bound_oldest_dropped_first() {
        let console = ConsoleLog::new(None);
        let long = "c".repeat(LONGEST_LINE - 4);
        for i in 0..1000 {
            console.push(&format!("{i:04}{long}"));
        }
        let kept = console.tail(usize::MAX);
        let bytes: usize = kept.iter().map(String::len).sum();
        assert!(bytes <= KEPT_BYTES, "{bytes} bytes kept");
        assert_eq!(kept.len(), KEPT_BYTES / LONGEST_LINE);
        assert!(kept.last().unwrap().starts_with("0999c"));
    }

    #[test]
    fn a_tail_within_a_byte_cap_keeps_the_newest_lines_and_counts_the_rest() {
        let console = ConsoleLog::new(None);
        for line in ["old", "\u{1}\u{1}", "new"] {
            console.push(line);
        }
        let all = console.tail_within(10, 1000, true);
        assert_eq!(
            all,
            Tail { lines: vec!["old".into(), "\u{1}\u{1}".into(), "new".into()], left_out: 0, json_bytes: 28 }
        );
        assert_eq!(serde_json::to_string(&all.lines).unwrap().len(), all.json_bytes);
        let cut = console.tail_within(10, 27, true);
        assert_eq!((cut.lines, cut.left_out), (vec!["\u{1}\u{1}".to_owned(), "new".to_owned()], 1));
        let measured = console.tail_within(2, 27, false);
        assert_eq!((measured.lines.len(), measured.left_out, measured.json_bytes), (0, 0, 22));
    }
}
