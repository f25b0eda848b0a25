//! What the whole daemon shares: the message, the extensions in config
//! order, where `ui/*` requests go, and the control socket's event fan-out.
//!
//! Extensions are replaced as a list on reload: the old ones are told
//! `shutdown {reason: "reload"}` (all at once, so a slow one costs 5 s, not
//! 5 s each), then the new list starts, each extension on its own, so one
//! slow `initialize` holds up no other.

use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use rpc_core::fanout::Fanout;
use rpc_core::{Router, RpcError};
use serde::Serialize;
use serde_json::json;

use crate::config::{Config, FileConfig};
use crate::document::Document;
use crate::errors;
use crate::extension::log::ExtensionLog;
use crate::extension::{Extension, State, StopReason, supervisor};
use crate::hl7::Bounds;
use crate::methods::ExtConn;
use crate::ui::UiRoute;

/// Control-socket event topics.
pub const TOPIC_EXTENSION_STATE: &str = "extension_state";
pub const TOPIC_LOG: &str = "log";
pub const TOPIC_MESSAGE_CHANGED: &str = "message_changed";
pub const TOPICS: [&str; 3] = [TOPIC_EXTENSION_STATE, TOPIC_LOG, TOPIC_MESSAGE_CHANGED];

pub struct Host {
    pub document: Document,
    pub ui: UiRoute,
    pub events: Fanout<Bytes>,
    pub data_dir: PathBuf,
    pub max_message: usize,
    /// How long a peer that owes replies may not read them before it is cut off.
    pub write_stall: Duration,
    config_file: Option<PathBuf>,
    settings: Mutex<FileConfig>,
    extensions: Mutex<Vec<Arc<Extension>>>,
    /// Serialises reloads: two at once would start two copies of each extension.
    reloading: tokio::sync::Mutex<()>,
    router: OnceLock<Arc<Router<ExtConn>>>,
    /// Set when the daemon stops: no extension starts after that.
    closing: AtomicBool,
}

impl Host {
    pub fn new(config: &Config) -> Arc<Host> {
        Arc::new(Host {
            document: Document::new(Bounds {
                // A message is addressed with four-byte offsets.
                max_bytes: config.max_message.min(Bounds::NONE.max_bytes),
                max_elements: config.max_elements,
            }),
            ui: UiRoute::new(config.file.ui.clone()),
            events: Fanout::new(rpc_core::fanout::DEFAULT_QUEUE, rpc_core::fanout::DEFAULT_QUEUE_BYTES),
            data_dir: config.data_dir.clone(),
            max_message: config.max_message,
            write_stall: config.write_stall,
            config_file: config.config_file.clone(),
            settings: Mutex::new(config.file.clone()),
            extensions: Mutex::new(Vec::new()),
            reloading: tokio::sync::Mutex::new(()),
            router: OnceLock::new(),
            closing: AtomicBool::new(false),
        })
    }

    pub fn settings(&self) -> FileConfig {
        self.settings.lock().clone()
    }

    /// The router every extension connection shares.
    pub fn extension_router(&self) -> Arc<Router<ExtConn>> {
        self.router.get_or_init(crate::methods::router).clone()
    }

    pub fn extensions(&self) -> Vec<Arc<Extension>> {
        self.extensions.lock().clone()
    }

    pub fn extension(&self, name: &str) -> Option<Arc<Extension>> {
        self.extensions().into_iter().find(|e| e.name() == name)
    }

    /// Publishes a control-socket event.
    pub fn publish(&self, topic: &str, params: impl Serialize) {
        if self.events.subscriber_count() == 0 {
            return;
        }
        let json = json!({"jsonrpc": "2.0", "method": topic, "params": params});
        if let Ok(bytes) = serde_json::to_vec(&json) {
            self.events.publish(topic, &Bytes::from(bytes));
        }
    }

    pub fn publish_state(&self, extension: &Extension) {
        self.publish(TOPIC_EXTENSION_STATE, extension.listing());
    }

    /// Starts the extensions of the configuration in effect.
    pub fn start_all(self: &Arc<Host>) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let settings = self.settings();
        let specs = settings.specs().unwrap_or_default();
        let mut started = Vec::new();
        for spec in specs {
            let log_path = self.data_dir.join("logs").join(format!("{}.log", spec.name));
            let extension = Arc::new(Extension::new(spec, ExtensionLog::new_for(&log_path)));
            if extension.spec.enabled {
                supervisor::start(self.clone(), extension.clone());
            } else {
                extension.log.note("disabled in the configuration; not started");
            }
            started.push(extension);
        }
        *self.extensions.lock() = started;
    }

    /// The daemon is stopping: every extension gets `shutdown {reason:
    /// "closing"}` and none starts again.
    pub async fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.stop_all(StopReason::Closing).await;
    }

    /// Stops every extension with `reason`, all at once.
    pub async fn stop_all(&self, reason: StopReason) {
        let all = self.extensions();
        futures_util::future::join_all(all.iter().map(|e| e.stop(reason))).await;
    }

    /// `extensions/reload` and SIGHUP: reads the config file again; with a
    /// `name`, restarts only that extension (with its new settings).
    pub async fn reload(self: &Arc<Host>, name: Option<&str>) -> Result<Vec<String>, RpcError> {
        let _one_at_a_time = self.reloading.lock().await;
        if let Some(path) = &self.config_file
            && path.exists()
        {
            let file = FileConfig::load(path)
                .map_err(|e| RpcError::new(errors::GENERAL, format!("config not reloaded: {e}")))?;
            *self.settings.lock() = file.clone();
            self.ui.set_policy(file.ui.clone());
        }
        match name {
            None => {
                tracing::info!("reloading every extension");
                self.stop_all(StopReason::Reload).await;
                self.start_all();
            }
            Some(name) => {
                let old = self
                    .extension(name)
                    .ok_or_else(|| RpcError::new(errors::GENERAL, format!("no extension named {name:?}")))?;
                let spec = self.settings().specs().unwrap_or_default().into_iter().find(|s| s.name == name);
                let now_disabled = spec.as_ref().is_some_and(|s| !s.enabled);
                old.stop(if now_disabled { StopReason::Disabled } else { StopReason::Reload }).await;
                let Some(spec) = spec else {
                    // Gone from the file: it stays stopped and leaves the list.
                    self.extensions.lock().retain(|e| e.name() != name);
                    return Ok(self.extensions().iter().map(|e| e.name().to_owned()).collect());
                };
                let log_path = self.data_dir.join("logs").join(format!("{name}.log"));
                let fresh = Arc::new(Extension::new(spec, ExtensionLog::new_for(&log_path)));
                if fresh.spec.enabled && !self.closing.load(Ordering::SeqCst) {
                    supervisor::start(self.clone(), fresh.clone());
                }
                let mut list = self.extensions.lock();
                if let Some(slot) = list.iter_mut().find(|e| e.name() == name) {
                    *slot = fresh;
                }
            }
        }
        Ok(self.extensions().iter().map(|e| e.name().to_owned()).collect())
    }

    /// The running extension that handles `command`: the first in config
    /// order that declared it.
    pub fn command_owner(&self, command: &str) -> Option<Arc<Extension>> {
        self.extensions()
            .into_iter()
            .find(|e| e.state() == State::Running && e.info().is_some_and(|i| i.declares(command)))
    }

    /// Logs each command that `extension` and another initialised extension
    /// both declare: the first in config order handles it, and the warning
    /// goes to the log of the one that does not (whichever started first).
    pub fn warn_about_shadowed_commands(&self, extension: &Extension) {
        let Some(info) = extension.info() else { return };
        let all = self.extensions();
        let Some(position) = all.iter().position(|e| e.name() == extension.name()) else { return };
        for (i, other) in all.iter().enumerate().filter(|(i, _)| *i != position) {
            let Some(theirs) = other.info() else { continue };
            let (winner, loser) = if i < position { (&**other, extension) } else { (extension, &**other) };
            for command in info.commands().filter(|c| theirs.declares(c)) {
                tracing::warn!(
                    command,
                    winner = winner.name(),
                    ignored = loser.name(),
                    "two extensions declare the same command; the first in config order handles it"
                );
                loser.log.note(&format!("command {command} is also declared by {}, which handles it", winner.name()));
            }
        }
    }

    /// Sends `command/execute` to the extension that handles `command`.
    pub async fn execute(&self, command: &str) -> Result<String, RpcError> {
        let owner = self
            .command_owner(command)
            .ok_or_else(|| RpcError::new(errors::COMMAND_NOT_FOUND, format!("command not found: {command}")))?;
        let peer = owner
            .running_peer()
            .ok_or_else(|| RpcError::new(errors::COMMAND_NOT_FOUND, "the extension is not running"))?;
        peer.notify("command/execute", json!({"command": command}))
            .await
            .map_err(|_| RpcError::new(errors::GENERAL, format!("{} is gone", owner.name())))?;
        Ok(owner.name().to_owned())
    }

    /// Every extension's `schema`, merged in config order: later ones
    /// override earlier ones property by property; `null` removes.
    pub fn merged_schema(&self) -> serde_json::Value {
        let mut merged = serde_json::Value::Object(Default::default());
        for extension in self.extensions() {
            if let Some(schema) = extension.info().and_then(|i| i.schema) {
                merge(&mut merged, schema);
            }
        }
        merged
    }

    /// Sends an event notification to every running extension that asked for it.
    pub fn notify_extensions(
        &self,
        event: &str,
        mut params: impl FnMut(&crate::extension::protocol::EventSubscription) -> Option<serde_json::Value>,
    ) {
        for extension in self.extensions() {
            let Some(peer) = extension.running_peer() else { continue };
            let Some(subscription) = extension.info().and_then(|i| i.subscription(event).cloned()) else { continue };
            let Some(params) = params(&subscription) else { continue };
            let event = event.to_owned();
            // A slow reader must not hold up the others.
            tokio::spawn(async move {
                let _ = peer.notify(&event, params).await;
            });
        }
    }
}

/// Deep merge: objects property by property, `null` deletes, anything else
/// replaces; except Hermes' field lists (`"fields": [{"field": 3,
/// "component": 1, ...}]`), whose entries are matched by field and component
/// and merged property by property, an unmatched one added.
fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    use serde_json::Value;
    match (base, over) {
        (Value::Array(base), Value::Array(over)) if is_field_list(base) && is_field_list(&over) => {
            for entry in over {
                match base.iter_mut().find(|b| same_field(b, &entry)) {
                    Some(existing) => merge(existing, entry),
                    None => base.push(entry),
                }
            }
        }
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                if value.is_null() {
                    base.remove(&key);
                } else {
                    merge(base.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// A list of Hermes schema field entries: objects, each with a `field` number.
fn is_field_list(list: &[serde_json::Value]) -> bool {
    list.iter().all(|e| e.get("field").is_some_and(serde_json::Value::is_u64))
}

fn same_field(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    a.get("field") == b.get("field") && a.get("component") == b.get("component")
}

impl ExtensionLog {
    fn new_for(path: &std::path::Path) -> ExtensionLog {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        ExtensionLog::new(&name, Some(path.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_merge_later_over_earlier_and_null_removes() {
        let mut merged = json!({});
        merge(&mut merged, json!({"PID": {"3": {"note": "a", "pattern": "x"}}, "OBX": {"2": {"values": ["A"]}}}));
        merge(&mut merged, json!({"PID": {"3": {"note": "b", "pattern": null}}, "OBX": {"2": {"values": ["B", "C"]}}}));
        assert_eq!(merged, json!({"PID": {"3": {"note": "b"}}, "OBX": {"2": {"values": ["B", "C"]}}}));
    }

    /// Hermes' own shape: field entries are matched by field and component.
    #[test]
    fn hermes_field_lists_merge_entry_by_entry() {
        let mut merged = json!({});
        merge(
            &mut merged,
            json!({"segments": {"PID": {"fields": [
                {"field": 3, "component": 1, "note": "MRN", "pattern": "^[0-9]{8}$"},
                {"field": 8, "values": {"M": "Male"}}
            ]}}}),
        );
        merge(
            &mut merged,
            json!({"segments": {"PID": {"fields": [
                {"field": 3, "component": 1, "pattern": null, "maxlength": 8},
                {"field": 3, "note": "whole field"}
            ]}, "OBX": {"fields": [{"field": 2, "required": true}]}}}),
        );
        assert_eq!(
            merged,
            json!({"segments": {"PID": {"fields": [
                {"field": 3, "component": 1, "note": "MRN", "maxlength": 8},
                {"field": 8, "values": {"M": "Male"}},
                {"field": 3, "note": "whole field"}
            ]}, "OBX": {"fields": [{"field": 2, "required": true}]}}})
        );
    }
}
