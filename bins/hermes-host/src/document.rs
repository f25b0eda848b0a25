//! The message being edited: at most one, held in memory, with the file it
//! came from. Every change bumps a version and wakes whoever watches
//! ([`Document::changes`]): the event debouncer and control subscribers.
//!
//! Every message held is within the [`Bounds`] (bytes, elements), however it
//! came: set, opened, patched. An edit is made on a copy that then takes the
//! message's place, so a request that fails half-way changes nothing.
//!
//! Saving is atomic: a temporary file in the target's directory, synced,
//! renamed over the target, and the directory synced, so a crash leaves the
//! old file or the new one, never half of either.

use parking_lot::Mutex;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::value::RawValue;

use tokio::sync::watch;

use crate::errors;
use crate::hl7::patch::{self, Patch, Refusal};
use crate::hl7::tree::{self, Format};
use crate::hl7::{Bounds, Exceeded, Hl7Message, InvalidMessage};
use rpc_core::RpcError;

mod edits;
mod file;

use file::{not_found, write_atomically};

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
    /// Shared with readers, who send or render it outside the lock: a read
    /// costs a reference count, not a copy. Never changed in place: an edit
    /// makes the new message whole, then takes its place here.
    message: Option<Arc<HeldMessage>>,
    file: Option<PathBuf>,
    /// Edited since it was opened or saved (a new message given content is
    /// dirty too: it is in no file yet).
    dirty: bool,
    /// Which message this is: counted up each time one is opened or created,
    /// kept by its edits. A save that ends after another message took this
    /// one's place must leave that one alone (its file, its dirty state).
    generation: u64,
}

/// The message as text in some format: in hl7, the held message's own
/// text, shared rather than copied (`editor/getMessage` in hl7 is the hot
/// path of every extension, B6); otherwise rendered for this reader.
#[derive(Clone, Debug)]
pub enum Text {
    Held(Arc<HeldMessage>),
    Rendered(String),
}

impl Text {
    /// The text as a JSON string: the held message's is written once and
    /// shared by every read after it.
    pub fn to_json<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::Serialize;
        match self {
            Text::Held(held) => held.json().serialize(serializer),
            Text::Rendered(text) => serializer.serialize_str(text),
        }
    }
}

/// A message held, with its text as a JSON string, written on the first read
/// that sends it. Escaping a message (every segment ends in `\r`) was most of
/// an `editor/getMessage`, and a held message never changes (an edit makes a
/// new one), so every read until the next edit shares one copy. It costs the
/// text's size again, once read, for the one message held.
#[derive(Debug)]
pub struct HeldMessage {
    message: Hl7Message,
    json: OnceLock<Box<RawValue>>,
}

impl HeldMessage {
    fn new(message: Hl7Message) -> Arc<HeldMessage> {
        Arc::new(HeldMessage { message, json: OnceLock::new() })
    }

    pub fn json(&self) -> &RawValue {
        self.json
            .get_or_init(|| serde_json::value::to_raw_value(self.message.as_str()).expect("a string always serialises"))
    }
}

impl Deref for HeldMessage {
    type Target = Hl7Message;

    fn deref(&self) -> &Hl7Message {
        &self.message
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Text::Held(message) => message.as_str(),
            Text::Rendered(text) => text,
        }
    }
}

/// A message given as a tree (json, yaml, toml) is read whole before any
/// of it is checked: serde_json's values, the toml crate's document, some
/// 100 to 300 bytes a value. So a tree may have at most this share of the
/// element bound in values, counted from above by the characters that can
/// start one (see [`tree_values`]) before it is read.
pub const TREE_SHARE: usize = 8;

/// At least how many values (and keys) `text` in a tree format can hold:
/// every one but the first follows a `,` `:` `=` `[` `{` or line break,
/// wherever those are (in a string too: the count errs high, never low).
pub fn tree_values(text: &str) -> usize {
    1 + text.bytes().filter(|b| matches!(b, b',' | b':' | b'=' | b'[' | b'{' | b'\n')).count()
}

pub struct Document {
    held: Mutex<Held>,
    /// The version and the last change, for watchers.
    changes: watch::Sender<(u64, Option<Change>)>,
    /// What every message held stays within, however it came.
    bounds: Bounds,
    /// Whose turn it is to change the message: one change at a time, in the
    /// order they came ([`edits`]).
    turn: Arc<tokio::sync::Mutex<()>>,
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
    pub fn new(bounds: Bounds) -> Document {
        Document {
            held: Mutex::default(),
            changes: watch::channel((0, None)).0,
            bounds,
            turn: Arc::new(tokio::sync::Mutex::new(())),
        }
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

    /// Whether the message has changes no file holds.
    pub fn is_dirty(&self) -> bool {
        self.held.lock().dirty
    }

    /// The message held (shared) and its file, if one is open.
    pub fn current(&self) -> Option<(Arc<HeldMessage>, Option<PathBuf>)> {
        let held = self.held.lock();
        held.message.clone().map(|message| (message, held.file.clone()))
    }

    /// The message as text in `format`, or -32003 when none is open.
    pub fn get(&self, format: Format) -> Result<(Text, Option<PathBuf>), RpcError> {
        let (message, file) = self.current().ok_or_else(errors::no_message)?;
        let text = match format {
            Format::Hl7 => Text::Held(message),
            // Rendering a large message happens outside the lock.
            _ => Text::Rendered(tree::render(&message, format).map_err(|e| RpcError::new(errors::GENERAL, e))?),
        };
        Ok((text, file))
    }

    /// Replaces the message (opening one if none was); -32004 when the text
    /// is not a message in `format` or the message is past the bounds. In
    /// its turn ([`edits`]), as every change of the message held.
    fn set_now(&self, text: String, format: Format, by: &str) -> Result<(), RpcError> {
        let message = read(&self.bounds, text, format)?;
        let mut held = self.held.lock();
        held.message = Some(HeldMessage::new(message));
        held.dirty = true;
        drop(held);
        self.changed(Change::Edited { by: by.to_owned() });
        Ok(())
    }

    /// Applies patches in order; each bad one is reported and the rest still
    /// apply, and so is one that would take the message past its bounds.
    /// -32003 when no message is open. In its turn ([`edits`]).
    fn patch_now(&self, patches: &[Patch], by: &str) -> Result<PatchOutcome, RpcError> {
        let mut outcome = PatchOutcome { success: true, patches_applied: 0, errors: Vec::new() };
        self.edit(|message| {
            for (index, p) in patches.iter().enumerate() {
                let message = match patch::apply_within(message, p, &self.bounds) {
                    Ok(()) => {
                        outcome.patches_applied += 1;
                        continue;
                    }
                    Err(Refusal::Invalid(reason)) => reason,
                    Err(Refusal::Exceeds(exceeded)) => {
                        format!("not applied: the message would have {}", over(exceeded))
                    }
                };
                outcome.errors.push(PatchFailure { index, path: p.path.clone(), message });
            }
            outcome.patches_applied > 0
        })?;
        outcome.success = outcome.errors.is_empty();
        if outcome.patches_applied > 0 {
            self.changed(Change::Edited { by: by.to_owned() });
        }
        Ok(outcome)
    }

    /// Runs `edit` on a copy of the message and puts the copy in its place
    /// if `edit` says it changed: all or nothing. A panic in `edit` (which
    /// the engine answers -32603) leaves the message held as it was, and the
    /// lock (parking_lot's: never poisoned) free. -32003 when none is open.
    ///
    /// The lock is held only to take the message and to put the copy back,
    /// not while `edit` runs (seconds, for a large batch of patches): readers
    /// on the runtime's thread never wait for an edit. Two edits at once
    /// would each lose the other's, so every change of the message runs in
    /// its turn ([`edits`]).
    fn edit(&self, edit: impl FnOnce(&mut Hl7Message) -> bool) -> Result<bool, RpcError> {
        let taken = self.held.lock().message.clone().ok_or_else(errors::no_message)?;
        let mut message = Hl7Message::clone(&taken);
        drop(taken);
        let changed = edit(&mut message);
        if changed {
            let mut held = self.held.lock();
            held.message = Some(HeldMessage::new(message));
            held.dirty = true;
        }
        Ok(changed)
    }

    /// Starts a new message, not saved to any file yet: a bare header, or
    /// `content` (text in a format). -32004 when the content is not a
    /// message or is past the bounds; the message held before is then kept.
    /// In its turn ([`edits`]).
    fn new_message_now(&self, content: Option<(String, Format)>) -> Result<(), RpcError> {
        let dirty = content.is_some();
        let message = match content {
            Some((text, format)) => read(&self.bounds, text, format)?,
            None => Hl7Message::new_empty(),
        };
        self.replace(message, None, dirty);
        self.changed(Change::Opened { file: None, is_new: true });
        Ok(())
    }

    /// Holds another message in the place of the one held, if any: a new
    /// generation, so that a save of the old one still running leaves it be.
    fn replace(&self, message: Hl7Message, file: Option<PathBuf>, dirty: bool) {
        let mut held = self.held.lock();
        let generation = held.generation + 1;
        *held = Held { message: Some(HeldMessage::new(message)), file, dirty, generation };
    }

    /// Writes the message to `path` (default: its own file) atomically.
    /// -32003 when nothing is open; -32005 when there is no path to save to;
    /// -32006 when something other than a regular file (a FIFO, a socket, a
    /// device, a directory) is at the path: it is never replaced. A symbolic
    /// link is replaced by the file, never followed.
    ///
    /// The message saved is the one held when the save starts. If another is
    /// opened or created while it is written, the file holds the one saved
    /// and the answer says so, but the message now held keeps its own file
    /// and dirty state, and no `saved` event tells of it.
    pub async fn save(&self, path: Option<&Path>) -> Result<PathBuf, RpcError> {
        let (message, current, generation) = {
            let held = self.held.lock();
            let message = held.message.clone().ok_or_else(errors::no_message)?;
            (message, held.file.clone(), held.generation)
        };
        let target = match (path, &current) {
            (Some(path), _) => std::path::absolute(path).map_err(|e| not_found(path, e))?,
            (None, Some(file)) => file.clone(),
            (None, None) => {
                return Err(RpcError::new(errors::INVALID_PATH, "the message has no file yet: give a path"));
            }
        };
        let (write_to, written) = (target.clone(), message.clone());
        tokio::task::spawn_blocking(move || {
            refuse_all_but_regular_files(&write_to)?;
            write_atomically(&write_to, written.as_str().as_bytes())
                .map_err(|e| RpcError::new(errors::GENERAL, format!("{}: {e}", write_to.display())))
        })
        .await
        .map_err(|e| RpcError::internal(e.to_string()))??;
        let save_as = current.as_deref() != Some(target.as_path());
        let mut held = self.held.lock();
        if held.generation != generation {
            drop(held);
            tracing::info!(
                file = %target.display(),
                "saved a message that another one replaced meanwhile; the one held now keeps its own file"
            );
            return Ok(target);
        }
        held.file = Some(target.clone());
        // An edit made while the file was written is not in it.
        held.dirty = !held.message.as_ref().is_some_and(|m| Arc::ptr_eq(m, &message));
        drop(held);
        self.changed(Change::Saved { file: target.clone(), save_as });
        Ok(target)
    }
}

/// -32006 when something is at `path` that a save must not replace: only a
/// regular file, a symbolic link (the link is replaced, what it points to
/// untouched) or nothing may be there. Checked just before the write; a
/// FIFO, a socket (the host's own control socket) or a device put there
/// after the check would still be replaced, by its renaming, never written
/// into.
fn refuse_all_but_regular_files(path: &Path) -> Result<(), RpcError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() && !meta.file_type().is_symlink() => Err(RpcError::new(
            errors::PATH_NOT_FOUND,
            format!(
                "{}: not a regular file (a FIFO, a socket, a device or a directory is never replaced by a save)",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Reads a message in `format` and holds it to the bounds.
fn read(bounds: &Bounds, text: String, format: Format) -> Result<Hl7Message, RpcError> {
    let most = bounds.max_elements / TREE_SHARE;
    if format != Format::Hl7 && tree_values(&text) > most {
        return Err(RpcError::new(
            errors::INVALID_MESSAGE,
            format!(
                "invalid message: a {} tree is read with at most {most} values (an eighth of \
                 HERMES_HOST_MAX_ELEMENTS, --max-elements; every `,` `:` `=` `[` `{{` and line break counts \
                 one), as its reader holds them all at once; give a message this large as hl7",
                format.as_str()
            ),
        ));
    }
    let message = tree::read_owned(text, format).map_err(invalid)?;
    bounds.check(message.len(), message.elements()).map_err(|exceeded| {
        RpcError::new(errors::INVALID_MESSAGE, format!("invalid message: it has {}", over(exceeded)))
    })?;
    Ok(message)
}

/// What is past which bound, and the setting that moves it.
fn over(exceeded: Exceeded) -> String {
    match exceeded {
        Exceeded::Bytes { bytes, max } => {
            format!("{bytes} bytes, over the limit of {max} (HERMES_HOST_MAX_MESSAGE, --max-message)")
        }
        Exceeded::Elements { elements, max } => format!(
            "{elements} elements (segments and delimiters), over the limit of {max} \
             (HERMES_HOST_MAX_ELEMENTS, --max-elements)"
        ),
    }
}

fn invalid(e: InvalidMessage) -> RpcError {
    RpcError::new(errors::INVALID_MESSAGE, format!("invalid message: {e}"))
}

#[cfg(test)]
mod tests;
