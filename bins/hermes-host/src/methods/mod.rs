//! What extensions may ask of the host: `editor/*` ([`editor`]) and `ui/*`
//! ([`ui`]). One router serves every extension's connection; its gate holds
//! an extension's requests until its `initialize` has completed (they are
//! served then, in order), and refuses them with -32001 if it failed.
//!
//! Requests run concurrently, per connection and across extensions: a
//! dialog waiting for a person holds one handler of one extension and
//! nothing else.

pub mod editor;
pub mod ui;

use std::sync::Arc;

use rpc_core::{Ctx, Gate, Router, RpcError};
use tokio::sync::watch;

use crate::errors;
use crate::extension::Extension;
use crate::host::Host;

/// Where an extension's process is in its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Starting,
    Running,
    Failed,
}

/// The state of one extension connection.
pub struct ExtConn {
    pub host: Arc<Host>,
    pub extension: Arc<Extension>,
    pub ready: watch::Receiver<Readiness>,
}

pub fn router() -> Arc<Router<ExtConn>> {
    let router = Router::new()
        .gate(hold_until_initialized)
        .method("editor/getMessage", editor::get_message)
        .method("editor/patchMessage", editor::patch_message)
        .method("editor/setMessage", editor::set_message)
        .method("ui/openWindow", ui::open_window)
        .method("ui/closeWindow", ui::close_window)
        .method("ui/showMessage", ui::show_message)
        .method("ui/showConfirm", ui::show_confirm)
        .method("ui/openFile", ui::open_file)
        .method("ui/openFiles", ui::open_files)
        .method("ui/saveFile", ui::save_file)
        .method("ui/selectDirectory", ui::select_directory);
    router.build().expect("each method is registered once")
}

fn not_initialised() -> RpcError {
    RpcError::new(errors::NOT_INITIALISED, "the extension is not initialised")
}

fn hold_until_initialized(ctx: &Ctx<ExtConn>, _method: &str) -> Gate {
    let mut ready = ctx.state.ready.clone();
    let now = *ready.borrow();
    match now {
        Readiness::Running => Gate::Open,
        Readiness::Failed => Gate::Closed(not_initialised()),
        Readiness::Starting => Gate::Wait(Box::pin(async move {
            match ready.wait_for(|r| *r != Readiness::Starting).await.map(|r| *r) {
                Ok(Readiness::Running) => Ok(()),
                _ => Err(not_initialised()),
            }
        })),
    }
}
