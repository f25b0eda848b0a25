//! Prompts injected by clients and not yet given to the agent: bounded in
//! count and bytes, and kept in `.ralph/injected.jsonl`, one JSON line each.
//!
//! An injection appends its own line and syncs it, so it costs a write of its
//! own size: never a rewrite of the prompts before it or of state.json (120
//! injections of 256 KiB used to rewrite and fsync a state.json growing to
//! 30 MB on every call). A restart, after a crash too, finds them in the file.
//! The next iteration takes them all and empties the file.
//!
//! The file may go while the loop runs (`git clean -fdx` removes `.ralph`):
//! an injection then writes every prompt waiting, its own too, to a new file
//! at the path before it is acknowledged, never to the open descriptor of
//! the removed one. Read back, the file is bounded: only a regular file,
//! each line at most what the longest prompt makes, and all of it at most
//! [`max_file`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files;

/// Longest prompt one `inject_prompt` may add.
pub const MAX_PROMPT: usize = 256 * 1024;

/// The longest line an accepted prompt makes: every byte of the longest
/// prompt escaped (a control character is six, `\u0001`), in
/// `{"prompt":""}` and its newline.
pub const MAX_LINE: usize = 6 * MAX_PROMPT + 16;

/// The most of the file that is read: 64 MiB, or twelve times the bytes
/// allowed to wait when that is more (prompts put back after an agent that
/// could not start may double what waits, and escaping makes a byte up to
/// six). A file past it was not written by the loop, and is refused.
pub fn max_file(limits: Limits) -> u64 {
    (12 * limits.bytes as u64).max(64 * 1024 * 1024)
}

/// How many prompts, and how many bytes of them, may wait at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub count: usize,
    pub bytes: usize,
}

/// Why an injection was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("prompt: longer than {MAX_PROMPT} bytes")]
    TooLong,
    #[error(
        "prompt: {count} injected prompts already wait for the next iteration, the most allowed \
         (--max-pending-prompts, RALPH_MAX_PENDING_PROMPTS: {count}); inject again once it has started"
    )]
    Count { count: usize },
    #[error(
        "prompt: {len} more bytes would make {total} bytes of injected prompts waiting for the next \
         iteration, more than allowed (--max-pending-prompt-bytes, RALPH_MAX_PENDING_PROMPT_BYTES: {limit})"
    )]
    Bytes { len: usize, total: usize, limit: usize },
    #[error("cannot save the prompt in {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// One line of the file.
#[derive(Deserialize, Serialize)]
struct Line<'a> {
    #[serde(borrow)]
    prompt: std::borrow::Cow<'a, str>,
}

#[derive(Debug)]
pub struct PendingPrompts {
    path: PathBuf,
    limits: Limits,
    prompts: Vec<String>,
    bytes: usize,
    /// The file, open for appending once something was written to it, and
    /// its length: a failed append is cut off again, so no torn line stays.
    file: Option<(File, u64)>,
}

impl PendingPrompts {
    pub fn path(task_dir: &Path) -> PathBuf {
        task_dir.join(".ralph/injected.jsonl")
    }

    /// The prompts the file holds. `earlier`: a prompt an older version kept
    /// in state.json, which comes first. A line cut short by a crash was never
    /// acknowledged, and is dropped; the file is then written again whole.
    pub fn load(task_dir: &Path, limits: Limits, earlier: Option<String>) -> io::Result<PendingPrompts> {
        let path = PendingPrompts::path(task_dir);
        let mut pending = PendingPrompts { path, limits, prompts: Vec::new(), bytes: 0, file: None };
        let mut clean = earlier.is_none();
        pending.prompts.extend(earlier);
        let shown = pending.path.display().to_string();
        let in_file = |e: io::Error| io::Error::new(e.kind(), format!("{shown}: {e}"));
        // Only a regular file: a FIFO or a link to /dev/zero would hold or exhaust the loop.
        match rpc_core::files::open_regular(&pending.path) {
            Ok(file) => clean &= pending.read_lines(file, max_file(limits)).map_err(in_file)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(in_file(e)),
        }
        pending.bytes = pending.prompts.iter().map(String::len).sum();
        if !clean {
            pending.rewrite()?;
        }
        Ok(pending)
    }

    /// Reads the file's lines, each at most [`MAX_LINE`], all at most
    /// `max_file` bytes; says whether every line was whole.
    fn read_lines(&mut self, file: File, max_file: u64) -> io::Result<bool> {
        let mut reader = BufReader::new(file.take(max_file + 1));
        let (mut clean, mut total, mut number) = (true, 0u64, 0usize);
        // Bytes, not text: a crash may cut a line inside a character, and
        // that line is torn like any other, not a reason to stop.
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
            if read == 0 {
                return Ok(clean);
            }
            (total, number) = (total + read as u64, number + 1);
            if total > max_file {
                return Err(rpc_core::files::Refused::TooLarge { max_bytes: max_file }.into());
            }
            if line.len() > MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    format!("line {number} is longer than {MAX_LINE} bytes, the longest an injected prompt makes"),
                ));
            }
            match serde_json::from_slice::<Line<'_>>(&line) {
                Ok(Line { prompt }) if line.ends_with(b"\n") => self.prompts.push(prompt.into_owned()),
                _ => {
                    tracing::warn!(file = %self.path.display(), "dropped a torn line");
                    clean = false;
                }
            }
        }
    }

    /// Adds `prompt` behind the others, within the limits, once it is on disk.
    pub fn push(&mut self, prompt: &str) -> Result<(), Refused> {
        if prompt.len() > MAX_PROMPT {
            return Err(Refused::TooLong);
        }
        if self.prompts.len() >= self.limits.count {
            return Err(Refused::Count { count: self.limits.count });
        }
        let total = self.bytes + prompt.len();
        if total > self.limits.bytes {
            return Err(Refused::Bytes { len: prompt.len(), total, limit: self.limits.bytes });
        }
        self.append(prompt).map_err(|source| Refused::Io { path: self.path.clone(), source })?;
        self.prompts.push(prompt.to_owned());
        self.bytes = total;
        Ok(())
    }

    /// Every prompt waiting, in order; the file is emptied. Should emptying it
    /// fail, a restart gives them again rather than never.
    pub fn take(&mut self) -> Vec<String> {
        let taken = std::mem::take(&mut self.prompts);
        self.bytes = 0;
        if !taken.is_empty()
            && let Err(e) = self.empty()
        {
            tracing::warn!(error = %e, file = %self.path.display(), "cannot empty the injected prompts' file");
        }
        taken
    }

    fn empty(&mut self) -> io::Result<()> {
        if fs::symlink_metadata(&self.path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
            // Gone (`git clean`): nothing left to empty.
            self.file = None;
            return Ok(());
        }
        if !self.holds_the_prompts()? {
            return self.rewrite();
        }
        let (file, len) = match &mut self.file {
            Some(open) => open,
            None => self.file.insert(open_for_append(&self.path)?),
        };
        file.set_len(0)?;
        file.sync_data()?;
        *len = 0;
        Ok(())
    }

    /// Puts prompts taken for an agent that could not start back in front,
    /// whatever the limits: they were accepted once.
    pub fn put_back(&mut self, mut taken: Vec<String>) {
        if taken.is_empty() {
            return;
        }
        taken.append(&mut self.prompts);
        self.prompts = taken;
        self.bytes = self.prompts.iter().map(String::len).sum();
        if let Err(e) = self.rewrite() {
            tracing::warn!(error = %e, file = %self.path.display(), "cannot save the injected prompts");
        }
    }

    fn append(&mut self, prompt: &str) -> io::Result<()> {
        if !self.holds_the_prompts()? {
            // The file went (`git clean` removed .ralph) or was replaced: a
            // line appended to the open one would be lost. Every prompt
            // waiting is written again at the path, with this one.
            self.prompts.push(prompt.to_owned());
            let written = self.rewrite();
            self.prompts.pop();
            return written;
        }
        let mut line = serde_json::to_vec(&Line { prompt: prompt.into() }).map_err(io::Error::other)?;
        line.push(b'\n');
        let (file, len) = match &mut self.file {
            Some(open) => open,
            None => self.file.insert(open_for_append(&self.path)?),
        };
        match file.write_all(&line).and_then(|()| file.sync_data()) {
            Ok(()) => {
                *len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Cut off what part of the line got written, so the next one starts clean.
                let _ = file.set_len(*len);
                Err(e)
            }
        }
    }

    /// Whether the file at the path is the one holding the prompts waiting:
    /// the one open, or, with none open, whatever is there when nothing waits.
    fn holds_the_prompts(&self) -> io::Result<bool> {
        let there = match fs::symlink_metadata(&self.path) {
            Ok(there) => there,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(self.file.is_none() && self.prompts.is_empty()),
            Err(e) => return Err(e),
        };
        match &self.file {
            Some((file, _)) => {
                let ours = file.metadata()?;
                Ok(there.dev() == ours.dev() && there.ino() == ours.ino())
            }
            None => Ok(true),
        }
    }

    /// Writes the file anew ([`files::replace`]): a crash leaves the old file or the new.
    fn rewrite(&mut self) -> io::Result<()> {
        self.file = None;
        let mut lines = Vec::new();
        for prompt in &self.prompts {
            serde_json::to_writer(&mut lines, &Line { prompt: prompt.as_str().into() }).map_err(io::Error::other)?;
            lines.push(b'\n');
        }
        files::replace(&self.path, &lines, 0o600)
    }
}

/// The file, open for appending (0600: prompts may be private); a file it
/// had to create is made durable with a sync of its directory.
fn open_for_append(path: &Path) -> io::Result<(File, u64)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    files::make_dir(dir)?;
    let existed = path.exists();
    // Not through a symbolic link: prompts are appended to whatever file it names.
    let file =
        OpenOptions::new().append(true).create(true).mode(0o600).custom_flags(nix::libc::O_NOFOLLOW).open(path)?;
    if !existed {
        File::open(dir)?.sync_all()?;
    }
    let len = file.metadata()?.len();
    Ok((file, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: Limits = Limits { count: 100, bytes: 1 << 20 };

    #[test]
    fn prompts_are_kept_in_order_across_a_restart_and_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut pending = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        pending.push("first\nline").unwrap();
        pending.push("second \"quoted\"").unwrap();
        let mut again = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        assert_eq!(again.take(), ["first\nline", "second \"quoted\""]);
        assert!(PendingPrompts::load(dir.path(), ROOMY, None).unwrap().take().is_empty(), "taken once");
        // A prompt from an older state.json comes first.
        pending.push("third").unwrap();
        let mut old = PendingPrompts::load(dir.path(), ROOMY, Some("from state.json".into())).unwrap();
        assert_eq!(old.take(), ["from state.json", "third"]);
    }

    #[test]
    fn limits_refuse_past_the_count_and_the_bytes_and_name_their_settings() {
        let dir = tempfile::tempdir().unwrap();
        let mut pending = PendingPrompts::load(dir.path(), Limits { count: 2, bytes: 10 }, None).unwrap();
        pending.push("12345").unwrap();
        let err = pending.push("1234567").unwrap_err().to_string();
        assert!(err.contains("RALPH_MAX_PENDING_PROMPT_BYTES: 10") && err.contains("12 bytes"), "{err}");
        pending.push("12345").unwrap();
        let err = pending.push("1").unwrap_err().to_string();
        assert!(err.contains("RALPH_MAX_PENDING_PROMPTS: 2"), "{err}");
        assert!(matches!(pending.push(&"x".repeat(MAX_PROMPT + 1)), Err(Refused::TooLong)));
        assert_eq!(pending.take().len(), 2);
        pending.push("1").unwrap();
        // Put back in front, whatever the limits.
        pending.put_back(vec!["0123456789".into(), "a".into()]);
        assert_eq!(PendingPrompts::load(dir.path(), ROOMY, None).unwrap().take(), ["0123456789", "a", "1"]);
    }

    #[test]
    fn a_line_torn_by_a_crash_is_dropped_and_the_next_append_starts_clean() {
        let dir = tempfile::tempdir().unwrap();
        let mut pending = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        pending.push("whole").unwrap();
        let path = PendingPrompts::path(dir.path());
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"prompt\": \"cut sh").unwrap();
        let mut again = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        again.push("after").unwrap();
        assert_eq!(PendingPrompts::load(dir.path(), ROOMY, None).unwrap().take(), ["whole", "after"]);
        // Only the file itself is left in .ralph/.
        assert_eq!(fs::read_dir(dir.path().join(".ralph")).unwrap().count(), 1);
    }

    #[test]
    fn a_line_torn_inside_a_character_is_dropped_like_any_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut pending = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        pending.push("whole").unwrap();
        let path = PendingPrompts::path(dir.path());
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        // "{"prompt": "caf\u{e9}", cut after the first byte of the é.
        file.write_all(b"{\"prompt\": \"caf\xc3").unwrap();
        let mut again = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        assert_eq!(again.take(), ["whole"]);
    }

    #[test]
    fn a_file_that_is_not_regular_or_has_a_line_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = PendingPrompts::path(dir.path());
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let err = PendingPrompts::load(dir.path(), ROOMY, None).unwrap_err().to_string();
        assert!(err.contains("injected.jsonl: not a regular file"), "{err}");
        fs::remove_file(&path).unwrap();
        // A line no prompt could make, without a newline: read only up to the limit.
        fs::write(&path, vec![b'x'; MAX_LINE + 10]).unwrap();
        let err = PendingPrompts::load(dir.path(), ROOMY, None).unwrap_err().to_string();
        assert!(err.contains(&format!("line 1 is longer than {MAX_LINE} bytes")), "{err}");
        // Lines each short enough, too many bytes in all.
        let tiny = Limits { count: 1, bytes: 1 };
        let line = "{\"prompt\":\"x\"}\n";
        let lines = line.repeat(max_file(tiny) as usize / line.len() + 1);
        fs::write(&path, lines).unwrap();
        let err = PendingPrompts::load(dir.path(), tiny, None).unwrap_err().to_string();
        assert!(err.contains(&format!("larger than {} bytes", max_file(tiny))), "{err}");
    }

    #[test]
    fn an_injection_after_the_file_was_removed_is_written_at_the_path_with_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let mut pending = PendingPrompts::load(dir.path(), ROOMY, None).unwrap();
        pending.push("before").unwrap();
        // `git clean -fdx` in the project.
        fs::remove_dir_all(dir.path().join(".ralph")).unwrap();
        pending.push("after").unwrap();
        let on_disk = || PendingPrompts::load(dir.path(), ROOMY, None).unwrap().prompts;
        assert_eq!(on_disk(), ["before", "after"]);
        pending.push("third").unwrap();
        assert_eq!(on_disk(), ["before", "after", "third"]);
        // Taken, then gone again: emptying does not make the file again.
        assert_eq!(pending.take().len(), 3);
        fs::remove_dir_all(dir.path().join(".ralph")).unwrap();
        assert!(pending.take().is_empty());
        pending.push("fourth").unwrap();
        assert_eq!(pending.take(), ["fourth"]);
        fs::remove_dir_all(dir.path().join(".ralph")).unwrap();
        assert_eq!(pending.take(), Vec::<String>::new());
        assert!(!dir.path().join(".ralph").exists());
    }
}
