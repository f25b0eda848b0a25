//! Where the extensions' dialogs (their `ui/*` requests) go: to the UI
//! client attached to the control socket (`ui/attach`, one at a time), which
//! answers them, or, with none attached, to the headless policy:
//!
//! | request | headless answer |
//! |---|---|
//! | `ui/showMessage` | logged, `{acknowledged: true}` |
//! | `ui/showConfirm` | `{confirmed: false}` (`[ui] headless_confirm`) |
//! | `ui/openFile`, `ui/saveFile`, `ui/selectDirectory` | `{path: null}` (cancelled) |
//! | `ui/openFiles` | `{paths: null}` (cancelled) |
//! | `ui/openWindow` | -32008 "no UI attached" |
//!
//! Windows get their ids here (`<extension>-window-<n>`), so the host knows
//! whose each one is: closing another extension's window is -32008.
//!
//! The methods on either side are `methods::extension::dialogs` (what an
//! extension asks) and `methods::control::attached_ui` (a client becoming
//! the UI, and telling of windows a person closed).

use parking_lot::Mutex;
use std::collections::HashMap;

use std::sync::atomic::{AtomicU64, Ordering};

use rpc_core::{CallError, PeerHandle, RpcError};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::config::UiPolicy;
use crate::errors;

pub struct DialogRoute {
    /// The attached UIs, most recent last: the last one still open answers.
    /// Only a UI that asked to take over (`ui/attach {takeover: true}`, what
    /// the page does, so that the newest tab answers) joins one already attached.
    attached: Mutex<Vec<PeerHandle>>,
    policy: Mutex<UiPolicy>,
    /// Open windows: the extension that opened each, and the UI connection showing it.
    windows: Mutex<HashMap<String, Window>>,
    next_window: AtomicU64,
}

struct Window {
    owner: String,
    shown_by: Option<u64>,
}

/// The attached UI did not answer.
pub enum Unanswered {
    /// No UI is attached: the headless policy answers.
    Headless,
    Failed(RpcError),
}

impl DialogRoute {
    pub fn new(policy: UiPolicy) -> DialogRoute {
        DialogRoute {
            attached: Mutex::default(),
            policy: Mutex::new(policy),
            windows: Mutex::default(),
            next_window: AtomicU64::new(1),
        }
    }

    pub fn set_policy(&self, policy: UiPolicy) {
        *self.policy.lock() = policy;
    }

    pub fn headless_confirm(&self) -> bool {
        self.policy.lock().headless_confirm
    }

    /// Makes `peer` the UI; -32000 while another one is attached, unless
    /// it takes over (then it answers until it goes, and the one before it again after).
    pub fn attach(&self, peer: PeerHandle, takeover: bool) -> Result<(), RpcError> {
        let mut attached = self.attached.lock();
        attached.retain(|p| !p.is_closed() && p.conn_id() != peer.conn_id());
        if !takeover && !attached.is_empty() {
            return Err(RpcError::new(errors::GENERAL, "another UI is attached"));
        }
        attached.push(peer);
        Ok(())
    }

    /// Forgets the UI of connection `conn_id`, and returns the windows it
    /// showed (window, owner): they are gone with it.
    pub fn detach(&self, conn_id: u64) -> Vec<(String, String)> {
        self.attached.lock().retain(|p| p.conn_id() != conn_id);
        let mut windows = self.windows.lock();
        let gone: Vec<String> =
            windows.iter().filter(|(_, w)| w.shown_by == Some(conn_id)).map(|(id, _)| id.clone()).collect();
        gone.into_iter().filter_map(|id| windows.remove(&id).map(|w| (id, w.owner))).collect()
    }

    /// The UI that answers now: the most recent attached one still open.
    fn answering(&self) -> Option<PeerHandle> {
        self.attached.lock().iter().rev().find(|p| !p.is_closed()).cloned()
    }

    pub fn is_attached(&self) -> bool {
        self.answering().is_some()
    }

    /// Asks the attached UI, waiting as long as a person takes (no timeout),
    /// until `cancel` fires (the asking extension went away).
    pub async fn ask(
        &self,
        method: &str,
        params: &Value,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, Unanswered> {
        let peer = self.answering().ok_or(Unanswered::Headless)?;
        Self::ask_peer(peer, method, params, cancel).await
    }

    /// Takes a window away: the UI that shows it is told `ui/closeWindow`
    /// (not the newest UI, if another tab showed it). `None` for no such window.
    pub async fn close_window(&self, id: &str, params: &Value, cancel: CancellationToken) -> Option<String> {
        let window = self.windows.lock().remove(id)?;
        let showing = self.attached.lock().iter().find(|p| Some(p.conn_id()) == window.shown_by).cloned();
        if let Some(peer) = showing.filter(|p| !p.is_closed()) {
            // Its answer does not matter: the window is gone for the host.
            let _ = Self::ask_peer(peer, "ui/closeWindow", params, cancel).await;
        }
        Some(window.owner)
    }

    async fn ask_peer(
        peer: PeerHandle,
        method: &str,
        params: &Value,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, Unanswered> {
        let answer = tokio::select! {
            answer = peer.request_raw(method, params, None) => answer,
            () = cancel.cancelled() => return Err(Unanswered::Failed(RpcError::new(errors::DIALOG_ERROR, "the request was abandoned"))),
        };
        answer.map_err(|e| {
            Unanswered::Failed(match e {
                CallError::Rpc(error) => error,
                CallError::Disconnected => RpcError::new(errors::DIALOG_ERROR, "the UI went away before answering"),
                other => RpcError::new(errors::DIALOG_ERROR, format!("the UI failed: {other}")),
            })
        })
    }

    pub fn new_window(&self, owner: &str) -> String {
        let id = format!("{owner}-window-{}", self.next_window.fetch_add(1, Ordering::Relaxed));
        let shown_by = self.answering().map(|p| p.conn_id());
        self.windows.lock().insert(id.clone(), Window { owner: owner.to_owned(), shown_by });
        id
    }

    pub fn forget_window(&self, id: &str) -> Option<String> {
        self.windows.lock().remove(id).map(|w| w.owner)
    }

    pub fn owner_of(&self, id: &str) -> Option<String> {
        self.windows.lock().get(id).map(|w| w.owner.clone())
    }
}
