//! The control socket: NDJSON JSON-RPC on a 0600 Unix socket, for users,
//! scripts and UI front ends. One small file per method group: the message
//! ([`message`]), extensions and commands ([`extensions`]), and what a
//! connection can become, a UI or a subscriber ([`session`]).

pub mod extensions;
pub mod message;
pub mod session;
mod status;

use parking_lot::Mutex;
use std::sync::Arc;

use rpc_core::Router;
use tokio::task::JoinHandle;

use crate::host::Host;

/// One control connection.
pub struct ControlConn {
    pub host: Arc<Host>,
    /// The task forwarding this connection's subscription, if it has one.
    pub pump: Mutex<Option<JoinHandle<()>>>,
}

impl ControlConn {
    pub fn new(host: Arc<Host>) -> ControlConn {
        ControlConn { host, pump: Mutex::new(None) }
    }
}

impl Drop for ControlConn {
    fn drop(&mut self) {
        if let Some(pump) = self.pump.lock().take() {
            pump.abort();
        }
    }
}

pub fn router() -> Arc<Router<ControlConn>> {
    Router::new()
        .method("message/new", message::new)
        .method("message/open", message::open)
        .method("message/get", message::get)
        .method("message/set", message::set)
        .method("message/patch", message::patch)
        .method("message/save", message::save)
        .method("extensions/list", extensions::list)
        .method("extensions/reload", extensions::reload)
        .method("extensions/logs", extensions::logs)
        .method("command/execute", extensions::execute)
        .method("schema/get", extensions::schema)
        .method("ui/attach", session::attach)
        .method("window/closed", session::window_closed)
        .method("subscribe", session::subscribe)
        .method("host/status", status::status)
        .build()
        .expect("each method is registered once")
}
