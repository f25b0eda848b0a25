//! Tells extensions and control subscribers what happened to the message.
//!
//! Extensions get the Hermes events they asked for in `capabilities.events`:
//! `message/opened`, `message/saved` at once, and `message/changed` debounced
//! (500 ms after the last edit, at most 2 s after the first of a burst, so a
//! stream of edits still reports), with the content in the subscriber's
//! format when it set `includeContent`. Control subscribers of
//! `message_changed` get every change at once, without content.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::document::Change;
use crate::hl7::tree::{self, Format};
use crate::state::{Host, TOPIC_MESSAGE_CHANGED};

pub const DEBOUNCE: Duration = Duration::from_millis(500);
pub const LONGEST_DELAY: Duration = Duration::from_secs(2);

/// Runs until the document is dropped.
pub async fn relay(host: Arc<Host>) {
    let mut changes = host.document.changes();
    // When the pending message/changed is due, and when the burst began.
    let mut due: Option<(Instant, Instant)> = None;
    loop {
        let sleep_until = due.map(|(at, _)| at);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let change = changes.borrow_and_update().1.clone();
                let Some(change) = change else { continue };
                announce(&host, &change);
                if let Change::Edited { .. } = change {
                    let now = Instant::now();
                    let first = due.map_or(now, |(_, first)| first);
                    due = Some(((now + DEBOUNCE).min(first + LONGEST_DELAY), first));
                }
            }
            () = sleep(sleep_until), if due.is_some() => {
                due = None;
                message_changed(&host);
            }
        }
    }
}

async fn sleep(until: Option<Instant>) {
    match until {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn path_text(path: &Option<std::path::PathBuf>) -> Value {
    path.as_ref().map_or(Value::Null, |p| json!(p.display().to_string()))
}

/// The immediate part: control subscribers, and opened/saved for extensions.
fn announce(host: &Host, change: &Change) {
    let file = host.document.file();
    match change {
        Change::Opened { file, is_new } => {
            let mut params = json!({"isNew": is_new});
            if let Some(path) = file {
                params["filePath"] = json!(path.display().to_string());
            }
            host.notify_extensions("message/opened", |_| Some(params.clone()));
            host.publish(
                TOPIC_MESSAGE_CHANGED,
                json!({"change": "opened", "isNew": is_new, "filePath": path_text(file)}),
            );
        }
        Change::Saved { file, save_as } => {
            let params = json!({"filePath": file.display().to_string(), "saveAs": save_as});
            host.notify_extensions("message/saved", |_| Some(params.clone()));
            host.publish(
                TOPIC_MESSAGE_CHANGED,
                json!({"change": "saved", "saveAs": save_as, "filePath": file.display().to_string()}),
            );
        }
        Change::Edited { by } => {
            host.publish(
                TOPIC_MESSAGE_CHANGED,
                json!({"change": "edited", "by": by, "filePath": path_text(&file), "dirty": host.document.is_dirty()}),
            );
        }
    }
}

/// The debounced `message/changed`, rendered once per format asked for
/// (hl7 is the held text itself).
fn message_changed(host: &Host) {
    let Some((message, file)) = host.document.current() else { return };
    let mut rendered: Vec<(Format, Option<String>)> = Vec::new();
    host.notify_extensions("message/changed", |subscription| {
        let mut params = json!({"hasFile": file.is_some()});
        if let Some(path) = &file {
            params["filePath"] = json!(path.display().to_string());
        }
        if subscription.options.include_content {
            let format = subscription.options.format.unwrap_or(Format::Hl7);
            let text = match format {
                Format::Hl7 => Some(json!(message.as_str())),
                _ => match rendered.iter().find(|(f, _)| *f == format) {
                    Some((_, text)) => text.as_deref().map(|text| json!(text)),
                    None => {
                        let text = tree::render(&message, format).ok();
                        let value = text.as_deref().map(|text| json!(text));
                        rendered.push((format, text));
                        value
                    }
                },
            };
            if let Some(text) = text {
                params["message"] = text;
                params["format"] = json!(format.as_str());
            }
        }
        Some(params)
    });
}
