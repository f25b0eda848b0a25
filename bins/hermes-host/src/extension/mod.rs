//! One configured extension: its spec, its state as users see it
//! (`starting`, `running`, `failed(reason)`, `stopped`), what it said in
//! `initialize`, and its log. Around it: the task that supervises its
//! process ([`supervisor`]), the list of them started and reloaded together
//! ([`lineup`]), the framing on its pipes ([`wire`]), the events on their
//! way to it ([`events`]), what its `initialize` result says ([`protocol`]) and the merge of their
//! schemas ([`schema`]).

pub mod events;
pub mod lineup;
pub mod log;
pub mod protocol;
pub mod schema;
pub mod supervisor;
pub mod wire;

use parking_lot::Mutex;
use rpc_core::PeerHandle;
use serde::Serialize;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ExtensionSpec;
use events::PendingEvents;
use log::ExtensionLog;
use protocol::InitializeResult;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Starting,
    Running,
    Failed(String),
    Stopped,
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Failed(_) => "failed",
            State::Stopped => "stopped",
        }
    }
}

/// Why the host stops an extension: the `reason` of its `shutdown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Closing,
    Disabled,
    Reload,
    Error,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Closing => "closing",
            StopReason::Disabled => "disabled",
            StopReason::Reload => "reload",
            StopReason::Error => "error",
        }
    }
}

#[derive(Default)]
struct Status {
    state: Option<State>,
    pid: Option<u32>,
    restarts: u32,
    info: Option<InitializeResult>,
    peer: Option<PeerHandle>,
    /// The events on their way to it while it runs.
    events: Option<Arc<PendingEvents>>,
}

pub struct Extension {
    pub spec: ExtensionSpec,
    pub log: ExtensionLog,
    status: Mutex<Status>,
    stop: watch::Sender<Option<StopReason>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// One row of `extensions/list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    pub name: String,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub commands: Vec<String>,
    pub toolbar_buttons: Vec<protocol::ToolbarButton>,
    pub pid: Option<u32>,
    pub restarts: u32,
}

impl Extension {
    pub fn new(spec: ExtensionSpec, log: ExtensionLog) -> Extension {
        let state = if spec.enabled { State::Starting } else { State::Stopped };
        Extension {
            spec,
            log,
            status: Mutex::new(Status { state: Some(state), ..Status::default() }),
            stop: watch::channel(None).0,
            task: Mutex::new(None),
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn state(&self) -> State {
        self.status.lock().state.clone().unwrap_or(State::Stopped)
    }

    pub fn info(&self) -> Option<InitializeResult> {
        self.status.lock().info.clone()
    }

    /// The connection of a running extension.
    pub fn running_peer(&self) -> Option<PeerHandle> {
        let status = self.status.lock();
        match status.state {
            Some(State::Running) => status.peer.clone(),
            _ => None,
        }
    }

    fn started(&self, pid: u32, peer: PeerHandle) {
        let mut status = self.status.lock();
        status.state = Some(State::Starting);
        status.pid = Some(pid);
        status.peer = Some(peer);
    }

    fn initialized(&self, info: InitializeResult, events: Arc<PendingEvents>) {
        let mut status = self.status.lock();
        status.state = Some(State::Running);
        status.info = Some(info);
        status.events = Some(events);
    }

    fn exited(&self, state: State) {
        let mut status = self.status.lock();
        status.state = Some(state);
        status.pid = None;
        status.peer = None;
        if let Some(events) = status.events.take() {
            events.close();
        }
    }

    /// Queues an event notification for it if it runs; never waits (see
    /// [`events`] for how what waits is bounded).
    pub fn queue_event(&self, method: &'static str, params: &serde_json::Value) {
        let status = self.status.lock();
        let events = if status.state == Some(State::Running) { status.events.clone() } else { None };
        drop(status);
        if let Some(events) = events {
            events.push(method, params);
        }
    }

    fn restarted(&self) {
        self.status.lock().restarts += 1;
    }

    pub fn listing(&self) -> Listing {
        let status = self.status.lock();
        let state = status.state.clone().unwrap_or(State::Stopped);
        let info = status.info.as_ref();
        Listing {
            name: self.spec.name.clone(),
            state: state.name(),
            reason: match state {
                State::Failed(reason) => Some(reason),
                _ => None,
            },
            enabled: self.spec.enabled,
            version: info.map(|i| i.version.clone()),
            description: info.and_then(|i| i.description.clone()),
            // Each once: a toolbar button usually runs a declared command.
            commands: info
                .map(|i| {
                    let mut commands: Vec<String> = Vec::new();
                    for command in i.commands() {
                        if !commands.iter().any(|known| known == command) {
                            commands.push(command.to_owned());
                        }
                    }
                    commands
                })
                .unwrap_or_default(),
            toolbar_buttons: info.map(|i| i.toolbar_buttons.clone()).unwrap_or_default(),
            pid: status.pid,
            restarts: status.restarts,
        }
    }

    /// Asks the supervisor to stop the extension (`shutdown` with `reason`,
    /// 5 s, then SIGKILL) and waits until it has.
    pub async fn stop(&self, reason: StopReason) {
        self.stop.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        if matches!(self.state(), State::Starting | State::Running) {
            self.exited(State::Stopped);
        }
    }
}
