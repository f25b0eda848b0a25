//! The method tables, every method in one place: what extensions call
//! ([`extension_router`], over each extension's stdio) and what control
//! clients call ([`control_router`], over the control socket). One small
//! file per group under [`extension`] and [`control`]; each handler works
//! on the shared state (`crate::state`) and the domain, never on the wiring.

pub mod control;
pub mod extension;

use std::sync::Arc;

use rpc_core::Router;

use crate::state::{ControlSession, ExtensionSession};

/// What an extension may ask of the host: `editor/*` and `ui/*`. Its gate
/// holds an extension's requests until its `initialize` has completed (they
/// are served then, in order), and refuses them with -32001 if it failed.
///
/// Requests run concurrently, per connection and across extensions: a
/// dialog waiting for a person holds one handler of one extension and
/// nothing else.
pub fn extension_router() -> Arc<Router<ExtensionSession>> {
    use extension::gate;
    use extension::{dialogs, editor};
    Router::new()
        .gate_conn(gate::hold_until_initialized)
        .method_now("editor/getMessage", editor::get_message)
        .method("editor/patchMessage", editor::patch_message)
        .method("editor/setMessage", editor::set_message)
        .method("ui/openWindow", dialogs::open_window)
        .method("ui/closeWindow", dialogs::close_window)
        .method("ui/showMessage", dialogs::show_message)
        .method("ui/showConfirm", dialogs::show_confirm)
        .method("ui/openFile", dialogs::open_file)
        .method("ui/openFiles", dialogs::open_files)
        .method("ui/saveFile", dialogs::save_file)
        .method("ui/selectDirectory", dialogs::select_directory)
        .build()
        .expect("each method is registered once")
}

/// The control socket: NDJSON JSON-RPC on a 0600 Unix socket, for users,
/// scripts and UI front ends: the message, extensions and commands, and what
/// a connection can become, the UI or a subscriber.
pub fn control_router() -> Arc<Router<ControlSession>> {
    use control::{attached_ui, extensions, files, message, status, subscribe};
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
        .method("files/list", files::list)
        .method("ui/attach", attached_ui::attach)
        .method("window/closed", attached_ui::window_closed)
        .method("subscribe", subscribe::subscribe)
        .method("host/status", status::status)
        .build()
        .expect("each method is registered once")
}
