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
    attached: Mutex<Option<PeerHandle>>,
    policy: Mutex<UiPolicy>,
    /// Open windows and the extension that opened each.
    windows: Mutex<HashMap<String, String>>,
    next_window: AtomicU64,
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
            attached: Mutex::new(None),
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

    /// Makes `peer` the UI; -32000 while another one is attached.
    pub fn attach(&self, peer: PeerHandle) -> Result<(), RpcError> {
        let mut attached = self.attached.lock();
        match attached.as_ref() {
            Some(current) if !current.is_closed() && current.conn_id() != peer.conn_id() => {
                Err(RpcError::new(errors::GENERAL, "another UI is attached"))
            }
            _ => {
                *attached = Some(peer);
                Ok(())
            }
        }
    }

    /// Forgets the UI of connection `conn_id` if it is the attached one, and
    /// returns the windows it had open (window, owner): they are gone with it.
    pub fn detach(&self, conn_id: u64) -> Vec<(String, String)> {
        let mut attached = self.attached.lock();
        if attached.as_ref().is_none_or(|p| p.conn_id() != conn_id) {
            return Vec::new();
        }
        *attached = None;
        self.windows.lock().drain().collect()
    }

    pub fn is_attached(&self) -> bool {
        self.attached.lock().as_ref().is_some_and(|p| !p.is_closed())
    }

    /// Asks the attached UI, waiting as long as a person takes (no timeout),
    /// until `cancel` fires (the asking extension went away).
    pub async fn ask(
        &self,
        method: &str,
        params: &Value,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, Unanswered> {
        let peer = self.attached.lock().clone().filter(|p| !p.is_closed()).ok_or(Unanswered::Headless)?;
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
        self.windows.lock().insert(id.clone(), owner.to_owned());
        id
    }

    pub fn forget_window(&self, id: &str) -> Option<String> {
        self.windows.lock().remove(id)
    }

    pub fn owner_of(&self, id: &str) -> Option<String> {
        self.windows.lock().get(id).cloned()
    }
}
