//! How requests reach the document: every change of the message in its turn,
//! and large work (parsing, patching, rendering a large message) on a thread
//! of its own.
//!
//! Why: the daemon runs on one thread (lib.rs), so work done inline in a
//! handler stops every other connection, timers and signals with it: one
//! `message/patch` of 250 000 patches kept `host/status` waiting 20 s and
//! SIGTERM 16 s. Small work stays inline, where it costs no thread. The
//! thread is a plain one, not tokio's blocking pool, which the runtime waits
//! for when it is dropped: a second signal exits at once, the work unfinished.
//!
//! Turns: edits run outside the document's lock (so readers never wait for
//! one), which is safe only one at a time, so each change (set, patch, new,
//! open) first takes the turn, an async lock (waiting for it blocks no
//! thread) held until its message is in place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rpc_core::RpcError;

use super::file::{not_found, read_regular_file};
use super::{Change, Document, PatchOutcome, Text, read};
use crate::errors;
use crate::hl7::patch::Patch;
use crate::hl7::tree::Format;

/// Bytes of work (text read or written, message copied per patch) above
/// which it runs on a thread of its own: a millisecond or so inline.
const INLINE_WORK: usize = 256 * 1024;

impl Document {
    /// Replaces the message with `text` in `format` (see `set_now`).
    pub async fn set(self: &Arc<Self>, text: String, format: Format, by: &str) -> Result<(), RpcError> {
        let turn = self.turn.clone().lock_owned().await;
        let (document, by) = (self.clone(), by.to_owned());
        run(text.len(), move || {
            let _turn = turn;
            document.set_now(text, format, &by)
        })
        .await
    }

    /// Applies `patches` in order (see `patch_now`).
    pub async fn patch(self: &Arc<Self>, patches: Vec<Patch>, by: &str) -> Result<PatchOutcome, RpcError> {
        let turn = self.turn.clone().lock_owned().await;
        // Each patch may copy or scan the message; the batch copies it once.
        let size = self.current().map_or(0, |(message, _)| message.len());
        let work = size.saturating_mul(patches.len().saturating_add(1));
        let (document, by) = (self.clone(), by.to_owned());
        run(work, move || {
            let _turn = turn;
            document.patch_now(&patches, &by)
        })
        .await
    }

    /// Starts a new message with no file (see `new_message_now`).
    pub async fn new_message(self: &Arc<Self>, content: Option<(String, Format)>) -> Result<(), RpcError> {
        let turn = self.turn.clone().lock_owned().await;
        let work = content.as_ref().map_or(0, |(text, _)| text.len());
        let document = self.clone();
        run(work, move || {
            let _turn = turn;
            document.new_message_now(content)
        })
        .await
    }

    /// Opens a file: -32006 when it cannot be read or is not a regular file,
    /// -32004 when it is not a message or is past the bounds. Read and parsed
    /// off the runtime's thread; the turn is taken only to put it in place.
    pub async fn open(self: &Arc<Self>, path: &Path) -> Result<PathBuf, RpcError> {
        let path = std::path::absolute(path).map_err(|e| not_found(path, e))?;
        let (reading, bounds) = (path.clone(), self.bounds);
        let message = off_thread(move || {
            let bytes = read_regular_file(&reading, bounds.max_bytes)?;
            let text = String::from_utf8(bytes).map_err(|_| {
                RpcError::new(errors::INVALID_MESSAGE, format!("{}: not UTF-8 text", reading.display()))
            })?;
            read(&bounds, text, Format::Hl7)
        })
        .await?;
        let _turn = self.turn.lock().await;
        self.replace(message, Some(path.clone()), false);
        self.changed(Change::Opened { file: Some(path.clone()), is_new: false });
        Ok(path)
    }

    /// The message in `format` ([`Document::get`]), a large one rendered as
    /// a tree, or written as one JSON string in hl7, off the runtime's thread.
    pub async fn render(self: &Arc<Self>, format: Format) -> Result<(Text, Option<PathBuf>), RpcError> {
        let size = self.current().map_or(0, |(message, _)| message.len());
        if size <= INLINE_WORK {
            return self.get(format);
        }
        let document = self.clone();
        off_thread(move || {
            let (text, file) = document.get(format)?;
            if let Text::Held(message) = &text {
                // Written once and kept (`HeldMessage::json`), so the reply's
                // serialisation on the runtime's thread only copies it.
                message.json();
            }
            Ok((text, file))
        })
        .await
    }
}

/// Runs `work` inline when it is small (`size` bytes of work at most
/// [`INLINE_WORK`]), else on a thread of its own.
async fn run<T: Send + 'static>(
    size: usize,
    work: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    if size <= INLINE_WORK { work() } else { off_thread(work).await }
}

/// Runs `work` on a thread of its own and waits for it without holding the
/// runtime's thread. A panic in it is answered -32603 (the message held is
/// then as it was: edits put a finished copy in place).
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("hermes-document".into())
        .spawn(move || {
            let _ = done.send(work());
        })
        .map_err(|e| RpcError::internal(format!("cannot start a thread for the work: {e}")))?;
    result.await.map_err(|_| RpcError::internal("the work failed (a bug: see the daemon's log)"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hl7::Bounds;

    /// Edits of a large message run on another thread while the caller's
    /// runtime (one thread, as the daemon's) keeps running other tasks.
    #[tokio::test(flavor = "current_thread")]
    async fn a_large_patch_leaves_the_runtime_free() {
        let doc = Arc::new(Document::new(Bounds { max_bytes: 64 << 20, max_elements: 1 << 23 }));
        let big = format!("MSH|^~\\&|A{}", "\rOBX|1|ST|X||value".repeat(100_000));
        doc.set(big, Format::Hl7, "test").await.unwrap();
        let patches: Vec<Patch> = (0..2000)
            .map(|n| Patch { path: format!("OBX[{}].5", n + 1), value: Some("v".into()), remove: None, create: None })
            .collect();
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counting = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                counting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        let outcome = doc.patch(patches, "test").await.unwrap();
        ticker.abort();
        assert_eq!(outcome.patches_applied, 2000);
        assert!(ticks.load(std::sync::atomic::Ordering::Relaxed) > 0, "the runtime ran nothing meanwhile");
    }
}
