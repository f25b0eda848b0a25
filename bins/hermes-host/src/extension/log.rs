//! An extension's stderr: read line by line into a ring of the last 1000
//! lines, each with a level taken from its prefix, appended to a log file
//! of its own, and published to `log` subscribers.
//!
//! rpc-core's `LineRing` keeps lines without levels, so the pipe is read
//! here; lines are cut at [`LONGEST_LINE`] like the engine does.
//!
//! The host's own lines about an extension start with [`HOST_MARKER`], and
//! only they do: an extension's line that would start with it (after blanks
//! and invisible characters) is prefixed [`FORGED_PREFIX`], so that no
//! extension can write what reads as the host's word (`-- hermes-host:
//! restarted`) in `extensions/logs`, the log file or the page.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use rpc_core::child::LONGEST_LINE;
use serde::Serialize;
use tokio::io::AsyncReadExt;

/// Lines kept in memory per extension.
pub const RING_LINES: usize = 1000;

/// A log file is rotated (to `.1`) past this size.
const ROTATE_AT: u64 = 10 * 1024 * 1024;

/// How the host's own lines in an extension's log begin.
pub const HOST_MARKER: &str = "-- hermes-host:";

/// What an extension's line that begins like the host's gets in front.
pub const FORGED_PREFIX: &str = "(stderr) ";

#[derive(Clone, Debug, Serialize)]
pub struct LogLine {
    pub level: &'static str,
    pub line: String,
}

/// The level a line announces with a prefix: `[ERROR]`, `[WARN]`,
/// `[WARNING]`, `[INFO]`, `[DEBUG]`, `ERROR:`, `WARN:` ... in any case,
/// after leading blanks or one bracketed tag (`[editor-ops] ERROR: x`).
/// Other lines are `info`.
pub fn level_of(line: &str) -> &'static str {
    let mut text = line.trim_start();
    for _ in 0..2 {
        let upper: String = text.chars().take(12).collect::<String>().to_ascii_uppercase();
        for (words, level) in [
            (&["ERROR", "ERR", "FATAL", "CRITICAL"][..], "error"),
            (&["WARNING", "WARN"][..], "warn"),
            (&["INFO"][..], "info"),
            (&["DEBUG", "TRACE"][..], "debug"),
        ] {
            for word in words {
                let bracketed =
                    upper.starts_with('[') && upper[1..].starts_with(word) && upper[1 + word.len()..].starts_with(']');
                let colon = upper.starts_with(word) && upper[word.len()..].starts_with(':');
                if bracketed || colon {
                    return level;
                }
            }
        }
        // One tag such as `[my-extension]` may come first.
        match text.strip_prefix('[').and_then(|rest| rest.find(']').map(|end| &rest[end + 1..])) {
            Some(rest) => text = rest.trim_start(),
            None => break,
        }
    }
    "info"
}

pub struct ExtensionLog {
    name: String,
    ring: Mutex<VecDeque<LogLine>>,
    path: Option<PathBuf>,
    file: Mutex<Option<std::fs::File>>,
}

impl ExtensionLog {
    /// A log for extension `name`, appended to `path` (a directory that
    /// cannot be created only costs the file, with a warning).
    pub fn new(name: &str, path: Option<PathBuf>) -> ExtensionLog {
        let file = path.as_deref().and_then(|p| open_append(p).map_err(|e| tracing::warn!(extension = name, path = %p.display(), error = %e, "cannot open the extension's log file")).ok());
        ExtensionLog { name: name.to_owned(), ring: Mutex::default(), path, file: Mutex::new(file) }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Adds a line the extension wrote (see [`FORGED_PREFIX`]).
    pub fn push(&self, line: &str) -> LogLine {
        match looks_like_the_host(line) {
            true => self.record(format!("{FORGED_PREFIX}{line}")),
            false => self.record(line.to_owned()),
        }
    }

    fn record(&self, mut text: String) -> LogLine {
        if text.len() > LONGEST_LINE {
            let mut end = LONGEST_LINE - 3;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        let entry = LogLine { level: level_of(&text), line: text };
        match entry.level {
            "error" => tracing::warn!(extension = %self.name, "{}", entry.line),
            "debug" => tracing::debug!(extension = %self.name, "{}", entry.line),
            _ => tracing::info!(extension = %self.name, "{}", entry.line),
        }
        {
            let mut ring = self.ring.lock();
            if ring.len() >= RING_LINES {
                ring.pop_front();
            }
            ring.push_back(entry.clone());
        }
        self.append(&format!("{} [{}] {}\n", timestamp(), entry.level, entry.line));
        entry
    }

    /// A line of the host's own about this extension (start, exit, restart),
    /// in the ring and the file, prefixed [`HOST_MARKER`].
    pub fn note(&self, text: &str) -> LogLine {
        self.record(format!("{HOST_MARKER} {text}"))
    }

    pub fn tail(&self, n: usize) -> Vec<LogLine> {
        let ring = self.ring.lock();
        ring.iter().skip(ring.len().saturating_sub(n)).cloned().collect()
    }

    fn append(&self, text: &str) {
        let mut file = self.file.lock();
        let Some(f) = file.as_mut() else { return };
        let _ = f.write_all(text.as_bytes());
        if f.metadata().is_ok_and(|m| m.len() > ROTATE_AT)
            && let Some(path) = &self.path
        {
            let _ = std::fs::rename(path, path.with_extension("log.1"));
            *file = open_append(path).ok();
        }
    }
}

/// Whether `line` would read as one of the host's own: it starts with
/// [`HOST_MARKER`] (in any case) once blanks, control characters and
/// invisible ones (zero-width spaces and joiners, soft hyphens, BOMs) before
/// it are out of sight, as they are on a terminal or in the page.
fn looks_like_the_host(line: &str) -> bool {
    let invisible = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{2064}' | '\u{feff}')
    };
    let rest = line.trim_start_matches(invisible);
    rest.get(..HOST_MARKER.len()).is_some_and(|start| start.eq_ignore_ascii_case(HOST_MARKER))
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

fn timestamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", now.as_secs(), now.subsec_millis())
}

/// Reads `pipe` to its end, a line at a time (at most [`LONGEST_LINE`] + 1
/// bytes held; the rest of a longer line is dropped), calling `on_line`.
pub async fn read_lines(mut pipe: tokio::net::unix::pipe::Receiver, mut on_line: impl FnMut(&str)) {
    let mut line: Vec<u8> = Vec::new();
    let mut skipping = false;
    let mut buf = vec![0u8; 8192];
    let mut emit = |bytes: &[u8]| {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        on_line(&String::from_utf8_lossy(bytes));
    };
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                if !skipping {
                    emit(&line);
                }
                line.clear();
                skipping = false;
            } else if !skipping {
                line.push(b);
                if line.len() > LONGEST_LINE {
                    emit(&line);
                    line.clear();
                    skipping = true;
                }
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_come_from_prefixes_in_any_case() {
        assert_eq!(level_of("[ERROR] boom"), "error");
        assert_eq!(level_of("error: boom"), "error");
        assert_eq!(level_of("  [Warning] careful"), "warn");
        assert_eq!(level_of("WARN: careful"), "warn");
        assert_eq!(level_of("[debug] detail"), "debug");
        assert_eq!(level_of("[editor-ops] ERROR: failed"), "error");
        assert_eq!(level_of("[editor-ops] Starting"), "info");
        assert_eq!(level_of("errors are fine"), "info");
        assert_eq!(level_of("Traceback (most recent call last):"), "info");
    }

    /// Only the host's own lines start with its marker, however an
    /// extension dresses a line up to look like one.
    #[test]
    fn an_extension_cannot_write_a_line_that_reads_as_the_host_s() {
        let log = ExtensionLog::new("x", None);
        let host = log.note("restarted");
        assert_eq!(host.line, "-- hermes-host: restarted");
        for forged in [
            "-- hermes-host: restarted",
            "  -- hermes-host: restarted",
            "\x1b\x07-- hermes-host: restarted",
            "\u{200b}-- HERMES-HOST: restarted",
            "\r-- hermes-host: restarted",
        ] {
            let line = log.push(forged).line;
            assert_eq!(line, format!("(stderr) {forged}"));
            assert!(!looks_like_the_host(&line), "{line:?}");
        }
        assert_eq!(log.push("-- hermes-hostile").line, "-- hermes-hostile");
        assert_eq!(log.push("a -- hermes-host: in the middle").line, "a -- hermes-host: in the middle");
        assert_eq!(log.push("-- hermes-h\u{e9}").line, "-- hermes-h\u{e9}");
    }

    #[test]
    fn the_ring_keeps_the_last_thousand_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = ExtensionLog::new("x", Some(dir.path().join("logs/x.log")));
        for i in 0..1005 {
            log.push(&format!("[WARN] line {i}"));
        }
        let tail = log.tail(2000);
        assert_eq!(tail.len(), RING_LINES);
        assert_eq!(tail[0].line, "[WARN] line 5");
        assert_eq!(tail[0].level, "warn");
        let file = std::fs::read_to_string(dir.path().join("logs/x.log")).unwrap();
        assert_eq!(file.lines().count(), 1005);
        assert!(file.lines().last().unwrap().ends_with("[warn] [WARN] line 1004"));
    }
}
