//! The state every connection shares, at the bottom of the tree: the
//! [`Host`] (the message, the extensions in config order, where dialogs go,
//! the control socket's event fan-out), and what each connection adds to it,
//! an [`ExtensionSession`] or a [`ControlSession`].
//!
//! It imports no method table and starts no process: starting, restarting
//! and reloading extensions is `extension::lineup` and
//! `extension::supervisor`, above it.

use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rpc_core::fanout::Fanout;
use rpc_core::{Router, RpcError};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Config, FileConfig};
use crate::dialog_route::DialogRoute;
use crate::document::Document;
use crate::errors;
use crate::extension::protocol::EventSubscription;
use crate::extension::{Extension, State, StopReason, schema};
use crate::hl7::Bounds;

/// Control-socket event topics.
pub const TOPIC_EXTENSION_STATE: &str = "extension_state";
pub const TOPIC_LOG: &str = "log";
pub const TOPIC_MESSAGE_CHANGED: &str = "message_changed";
/// A dialog sent to the attached UI, and its end: every other UI (another
/// tab of the page) shows it as pending elsewhere.
pub const TOPIC_DIALOG: &str = "dialog";
pub const TOPICS: [&str; 4] = [TOPIC_EXTENSION_STATE, TOPIC_LOG, TOPIC_MESSAGE_CHANGED, TOPIC_DIALOG];

/// The daemon's shared state: one per process, behind an `Arc` in every
/// connection's session and every extension's supervisor.
pub struct Host {
    pub document: Arc<Document>,
    pub dialogs: DialogRoute,
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
    /// What every extension's connection is served with (`methods`, given by `server`).
    extension_router: Arc<Router<ExtensionSession>>,
    /// Set when the daemon stops: no extension starts after that.
    closing: AtomicBool,
}

/// Where an extension's process is in its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Starting,
    Running,
    /// Being stopped: its requests are answered, then it hears `shutdown`.
    Stopping,
    Failed,
}

/// What one extension's connection adds to the host: who it is, and
/// whether its `initialize` has completed (its requests wait until then).
pub struct ExtensionSession {
    pub host: Arc<Host>,
    pub extension: Arc<Extension>,
    pub ready: watch::Receiver<Readiness>,
}

/// What one control client's connection adds to the host: the task
/// forwarding its subscription, if it has one.
pub struct ControlSession {
    pub host: Arc<Host>,
    pub pump: Mutex<Option<JoinHandle<()>>>,
}

impl ControlSession {
    pub fn new(host: Arc<Host>) -> ControlSession {
        ControlSession { host, pump: Mutex::new(None) }
    }
}

impl Drop for ControlSession {
    fn drop(&mut self) {
        if let Some(pump) = self.pump.lock().take() {
            pump.abort();
        }
    }
}

impl Host {
    pub fn new(config: &Config, extension_router: Arc<Router<ExtensionSession>>) -> Arc<Host> {
        Arc::new(Host {
            document: Arc::new(Document::new(Bounds {
                // A message is addressed with four-byte offsets.
                max_bytes: config.max_message.min(Bounds::NONE.max_bytes),
                max_elements: config.max_elements,
            })),
            dialogs: DialogRoute::new(config.file.ui.clone()),
            events: Fanout::new(rpc_core::fanout::DEFAULT_QUEUE, rpc_core::fanout::DEFAULT_QUEUE_BYTES),
            data_dir: config.data_dir.clone(),
            max_message: config.max_message,
            write_stall: config.write_stall,
            config_file: config.config_file.clone(),
            settings: Mutex::new(config.file.clone()),
            extensions: Mutex::new(Vec::new()),
            reloading: tokio::sync::Mutex::new(()),
            extension_router,
            closing: AtomicBool::new(false),
        })
    }

    pub fn settings(&self) -> FileConfig {
        self.settings.lock().clone()
    }

    /// The router every extension connection shares.
    pub fn extension_router(&self) -> Arc<Router<ExtensionSession>> {
        self.extension_router.clone()
    }

    /// Whether the daemon is stopping: then no extension starts.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    pub fn extensions(&self) -> Vec<Arc<Extension>> {
        self.extensions.lock().clone()
    }

    pub fn extension(&self, name: &str) -> Option<Arc<Extension>> {
        self.extensions().into_iter().find(|e| e.name() == name)
    }

    /// The extensions' names, in config order.
    pub fn extension_names(&self) -> Vec<String> {
        self.extensions().iter().map(|e| e.name().to_owned()).collect()
    }

    /// Makes `list` the extensions, in config order.
    pub fn set_extensions(&self, list: Vec<Arc<Extension>>) {
        *self.extensions.lock() = list;
    }

    /// Puts `fresh` in the place of the extension called `name`, or with
    /// `None` takes that extension out of the list.
    pub fn replace_extension(&self, name: &str, fresh: Option<Arc<Extension>>) {
        let mut list = self.extensions.lock();
        match fresh {
            Some(fresh) => {
                if let Some(slot) = list.iter_mut().find(|e| e.name() == name) {
                    *slot = fresh;
                }
            }
            None => list.retain(|e| e.name() != name),
        }
    }

    /// Held for the whole of a reload: two at once would start two copies
    /// of each extension.
    pub async fn one_reload_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.reloading.lock().await
    }

    /// Reads the config file again, if there is one: the extensions' settings
    /// and the headless dialog policy. A bad file keeps the running ones.
    pub fn reread_config_file(&self) -> Result<(), RpcError> {
        if let Some(path) = &self.config_file
            && path.exists()
        {
            let file = FileConfig::load(path)
                .map_err(|e| RpcError::new(errors::GENERAL, format!("config not reloaded: {e}")))?;
            *self.settings.lock() = file.clone();
            self.dialogs.set_policy(file.ui.clone());
        }
        Ok(())
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
    ///
    /// The notification waits for room in the extension's outbox, which an
    /// extension that stopped reading never makes: after `write_stall` with
    /// none the caller gets -32603 naming it, and the extension is cut off
    /// and restarted as a hung one (as the engine cuts off one that owes
    /// replies), so no caller, the page's buttons and MCP's `run_command`
    /// included, waits on it without end.
    pub async fn execute(&self, command: &str) -> Result<String, RpcError> {
        let owner = self
            .command_owner(command)
            .ok_or_else(|| RpcError::new(errors::COMMAND_NOT_FOUND, format!("command not found: {command}")))?;
        let peer = owner
            .running_peer()
            .ok_or_else(|| RpcError::new(errors::COMMAND_NOT_FOUND, "the extension is not running"))?;
        let sent = peer.notify("command/execute", json!({"command": command}));
        match tokio::time::timeout(self.write_stall, sent).await {
            Ok(Ok(())) => Ok(owner.name().to_owned()),
            Ok(Err(_)) => Err(RpcError::new(errors::GENERAL, format!("{} is gone", owner.name()))),
            Err(_) => {
                let why = format!(
                    "{} is not reading its input: command/execute could not be sent to it in {} s \
                     (HERMES_HOST_WRITE_STALL); it is restarted",
                    owner.name(),
                    self.write_stall.as_secs_f64()
                );
                tracing::warn!(extension = owner.name(), command, "{why}");
                owner.log.note(&format!("it did not read its input for {} s; cut off", self.write_stall.as_secs_f64()));
                peer.close(1011, "not reading its input");
                Err(RpcError::new(RpcError::INTERNAL_ERROR, why)
                    .with_data(json!({"reason": "not_reading", "extension": owner.name()})))
            }
        }
    }

    /// Every extension's `schema`, merged in config order: later ones
    /// override earlier ones property by property; `null` removes.
    pub fn merged_schema(&self) -> Value {
        schema::merged(self.extensions().iter().filter_map(|e| e.info().and_then(|i| i.schema)))
    }

    /// Queues an event notification for every running extension that asked
    /// for it; never waits, so a slow reader holds up no one.
    pub fn notify_extensions(&self, event: &'static str, mut params: impl FnMut(&EventSubscription) -> Option<Value>) {
        for extension in self.extensions() {
            let Some(subscription) = extension.info().and_then(|i| i.subscription(event).cloned()) else { continue };
            if !matches!(extension.state(), State::Running) {
                continue;
            }
            let Some(params) = params(&subscription) else { continue };
            extension.queue_event(event, &params);
        }
    }
}
