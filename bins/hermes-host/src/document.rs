//! The message being edited: at most one, held in memory, with the file it
//! came from. Every change bumps a version and wakes whoever watches
//! ([`Document::changes`]): the event debouncer and control subscribers.
//!
//! Saving is atomic: a temporary file in the target's directory, synced,
//! renamed over the target, and the directory synced, so a crash leaves the
//! old file or the new one, never half of either.

use parking_lot::Mutex;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use crate::errors;
use crate::hl7::patch::{self, Patch};
use crate::hl7::tree::{self, Format};
use crate::hl7::{Hl7Message, InvalidMessage};
use rpc_core::RpcError;

/// What changed the message, for events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Opened from a file or created new.
    Opened { file: Option<PathBuf>, is_new: bool },
    /// Edited (set or patched) by `by` (an extension's name, or `control`).
    Edited { by: String },
    /// Written to `file`; `save_as` when that is not where it came from.
    Saved { file: PathBuf, save_as: bool },
}

#[derive(Default)]
struct Held {
    /// Shared with readers, who render it outside the lock: a read costs a
    /// reference count, not a copy of every field (edits copy on write).
    message: Option<Arc<Hl7Message>>,
    file: Option<PathBuf>,
    /// The message as HL7 text, rendered once per version: `editor/getMessage`
    /// in hl7 is the hot path of every extension (B6).
    hl7: Option<Arc<str>>,
}

/// A snapshot for readers.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub text: String,
    pub file: Option<PathBuf>,
}

pub struct Document {
    held: Mutex<Held>,
    /// The version and the last change, for watchers.
    changes: watch::Sender<(u64, Option<Change>)>,
    max_message: usize,
}

/// The result of `editor/patchMessage`.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchOutcome {
    pub success: bool,
    pub patches_applied: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<PatchFailure>,
}

#[derive(Debug, serde::Serialize)]
pub struct PatchFailure {
    pub index: usize,
    pub path: String,
    pub message: String,
}

impl Document {
    pub fn new(max_message: usize) -> Document {
        Document { held: Mutex::default(), changes: watch::channel((0, None)).0, max_message }
    }

    pub fn changes(&self) -> watch::Receiver<(u64, Option<Change>)> {
        self.changes.subscribe()
    }

    fn changed(&self, change: Change) {
        self.changes.send_modify(|(version, last)| {
            *version += 1;
            *last = Some(change);
        });
    }

    pub fn file(&self) -> Option<PathBuf> {
        self.held.lock().file.clone()
    }

    /// The message in `format`, or -32003 when none is open.
    /// The message as text in `format`, shared (the hl7 text is rendered once
    /// per version), or -32003 when none is open.
    pub fn get(&self, format: Format) -> Result<(Arc<str>, Option<PathBuf>), RpcError> {
        let (message, file) = {
            let held = self.held.lock();
            let message = held.message.clone().ok_or_else(errors::no_message)?;
            if format == Format::Hl7
                && let Some(text) = &held.hl7
            {
                return Ok((text.clone(), held.file.clone()));
            }
            (message, held.file.clone())
        };
        // Rendering a large message happens outside the lock.
        let text: Arc<str> = tree::render(&message, format).map_err(|e| RpcError::new(errors::GENERAL, e))?.into();
        if format == Format::Hl7 {
            let mut held = self.held.lock();
            // Kept only if no edit came in between.
            if held.message.as_ref().is_some_and(|now| Arc::ptr_eq(now, &message)) {
                held.hl7 = Some(text.clone());
            }
        }
        Ok((text, file))
    }

    pub fn snapshot(&self) -> Option<Snapshot> {
        let held = self.held.lock();
        held.message.as_ref().map(|m| Snapshot { text: m.to_string(), file: held.file.clone() })
    }

    /// Replaces the message (opening one if none was); -32004 when the text
    /// is not a message in `format`.
    pub fn set(&self, text: &str, format: Format, by: &str) -> Result<(), RpcError> {
        let message = tree::read(text, format).map_err(invalid)?;
        let mut held = self.held.lock();
        held.message = Some(Arc::new(message));
        held.hl7 = None;
        drop(held);
        self.changed(Change::Edited { by: by.to_owned() });
        Ok(())
    }

    /// Applies patches in order; each bad one is reported and the rest still
    /// apply. -32003 when no message is open.
    pub fn patch(&self, patches: &[Patch], by: &str) -> Result<PatchOutcome, RpcError> {
        let mut outcome = PatchOutcome { success: true, patches_applied: 0, errors: Vec::new() };
        {
            let mut held = self.held.lock();
            held.hl7 = None;
            let message = Arc::make_mut(held.message.as_mut().ok_or_else(errors::no_message)?);
            for (index, p) in patches.iter().enumerate() {
                match patch::apply(message, p) {
                    Ok(()) => outcome.patches_applied += 1,
                    Err(message) => outcome.errors.push(PatchFailure { index, path: p.path.clone(), message }),
                }
            }
        }
        outcome.success = outcome.errors.is_empty();
        if outcome.patches_applied > 0 {
            self.changed(Change::Edited { by: by.to_owned() });
        }
        Ok(outcome)
    }

    /// Starts a new message, not saved to any file yet: a bare header, or
    /// `content` (text in a format). -32004 when the content is not a
    /// message; the message held before is then kept.
    pub fn new_message(&self, content: Option<(&str, Format)>) -> Result<(), RpcError> {
        let message = match content {
            Some((text, format)) => tree::read(text, format).map_err(invalid)?,
            None => Hl7Message::new_empty(),
        };
        *self.held.lock() = Held { message: Some(Arc::new(message)), ..Held::default() };
        self.changed(Change::Opened { file: None, is_new: true });
        Ok(())
    }

    /// Opens a file: -32006 when it cannot be read, -32004 when it is not a message.
    pub async fn open(&self, path: &Path) -> Result<PathBuf, RpcError> {
        let path = std::path::absolute(path).map_err(|e| not_found(path, e))?;
        let meta = tokio::fs::metadata(&path).await.map_err(|e| not_found(&path, e))?;
        if meta.len() > self.max_message as u64 {
            return Err(RpcError::new(
                errors::INVALID_MESSAGE,
                format!("{}: larger than the message limit", path.display()),
            ));
        }
        let bytes = tokio::fs::read(&path).await.map_err(|e| not_found(&path, e))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| RpcError::new(errors::INVALID_MESSAGE, format!("{}: not UTF-8 text", path.display())))?;
        let message = Hl7Message::parse(&text).map_err(invalid)?;
        *self.held.lock() = Held { message: Some(Arc::new(message)), file: Some(path.clone()), ..Held::default() };
        self.changed(Change::Opened { file: Some(path.clone()), is_new: false });
        Ok(path)
    }

    /// Writes the message to `path` (default: its own file) atomically.
    /// -32003 when nothing is open; -32005 when there is no path to save to.
    pub async fn save(&self, path: Option<&Path>) -> Result<PathBuf, RpcError> {
        let (text, current) = {
            let held = self.held.lock();
            let message = held.message.as_ref().ok_or_else(errors::no_message)?;
            (message.to_string(), held.file.clone())
        };
        let target = match (path, &current) {
            (Some(path), _) => std::path::absolute(path).map_err(|e| not_found(path, e))?,
            (None, Some(file)) => file.clone(),
            (None, None) => {
                return Err(RpcError::new(errors::INVALID_PATH, "the message has no file yet: give a path"));
            }
        };
        let write_to = target.clone();
        tokio::task::spawn_blocking(move || write_atomically(&write_to, text.as_bytes()))
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?
            .map_err(|e| RpcError::new(errors::GENERAL, format!("{}: {e}", target.display())))?;
        let save_as = current.as_deref() != Some(target.as_path());
        self.held.lock().file = Some(target.clone());
        self.changed(Change::Saved { file: target.clone(), save_as });
        Ok(target)
    }
}

fn invalid(e: InvalidMessage) -> RpcError {
    RpcError::new(errors::INVALID_MESSAGE, format!("invalid message: {e}"))
}

fn not_found(path: &Path, e: std::io::Error) -> RpcError {
    RpcError::new(errors::PATH_NOT_FOUND, format!("{}: {e}", path.display()))
}

/// Temp file in the same directory, fsync, rename over `path`, fsync the
/// directory. An existing file keeps its permissions; a new one is 0644.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new().prefix(".hermes-save-").tempfile_in(dir)?;
    file.write_all(bytes)?;
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    file.as_file().set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn save_replaces_the_file_whole_and_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.hl7");
        std::fs::write(&path, "MSH|^~\\&|OLD\r").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let doc = Document::new(1 << 20);
        assert_eq!(doc.save(None).await.unwrap_err().code, errors::NO_MESSAGE);
        doc.open(&path).await.unwrap();
        doc.set("MSH|^~\\&|NEW", Format::Hl7, "test").unwrap();
        assert_eq!(doc.save(None).await.unwrap(), path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "MSH|^~\\&|NEW");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }
}
