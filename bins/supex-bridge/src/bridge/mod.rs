//! The bridge server (port 9876): the method table, each connection's state,
//! the hello gate, and the legacy `{command, parameters}` dialect.

mod hello;
pub use hello::ServerInfo;
// The legacy dialect's adapter is the library's (lib.rs), where a fuzz target reaches it.
use parking_lot::Mutex;
use supex_bridge::bridge::legacy;

use std::path::PathBuf;
use std::sync::Arc;

use rpc_core::{NoParams, Router};
use serde_json::json;

use crate::auth::{self, Handshake};
use crate::server::{self, App};
use crate::tools;

/// Per-connection state of the bridge.
#[derive(Debug, Default)]
pub struct BridgeConn {
    pub handshake: Handshake,
    /// The canonical `workspace` given in `hello`: an extra root for this
    /// connection, and the base of its relative paths.
    workspace: Mutex<Option<PathBuf>>,
}

impl BridgeConn {
    pub fn workspace(&self) -> Option<PathBuf> {
        self.workspace.lock().clone()
    }

    fn set_workspace(&self, dir: Option<PathBuf>) {
        *self.workspace.lock() = dir;
    }
}

const HELLO_HINT: &str = "Send hello method with params: name, version, agent, pid";

/// Every method the bridge serves.
pub fn router(app: Arc<App>) -> Arc<Router<BridgeConn>> {
    let token_required = app.token_required();
    let hello_app = app.clone();
    let ping_app = app.clone();
    let call_app = app;
    Router::new()
        .method("hello", move |cx, params| hello::handle(hello_app.clone(), cx, params))
        .method("ping", move |_, _: NoParams| server::ping(&ping_app))
        .method("tools/list", |_, _: NoParams| async { Ok(tools::list()) })
        .method("tools/call", move |cx, params| tools::call(call_app.clone(), cx, params))
        // The Supex driver asks for resources; this runtime has none to offer.
        .method("resources/list", |_, _: NoParams| async { Ok(json!({"resources": []})) })
        .guard(move |cx, method| match method {
            "hello" | "ping" => Ok(()),
            _ if cx.state.handshake.is_identified() => Ok(()),
            _ => Err(auth::not_identified(token_required, HELLO_HINT)),
        })
        .rewrite_invalid(legacy::adapt)
        .build()
        .expect("the bridge registers each method once")
}
