//! A control client becoming the UI: `ui/attach` (one at a time, unless it
//! takes over, as each tab of the editor page does: the newest answers; the
//! host then sends it the extensions' `ui/*` requests, `crate::dialog_route`,
//! and it answers them), and `window/closed` (a person closed a window).
//! When the UI goes, the windows it had open are closed for their extensions.

use rpc_core::{Ctx, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::errors;
use crate::state::ControlSession;

#[derive(Serialize)]
pub struct Attached {
    attached: bool,
}

#[derive(Deserialize)]
pub struct AttachParams {
    /// Answer from now on even if another UI is attached (it answers again
    /// once this one goes). Without it, a second UI is refused.
    #[serde(default)]
    takeover: bool,
}

pub async fn attach(ctx: Ctx<ControlSession>, params: AttachParams) -> Result<Attached, RpcError> {
    let host = ctx.state.host.clone();
    host.dialogs.attach(ctx.peer.clone(), params.takeover)?;
    tracing::info!(conn = ctx.peer.conn_id(), "UI attached");
    let peer = ctx.peer.clone();
    tokio::spawn(async move {
        peer.closed().await;
        let windows = host.dialogs.detach(peer.conn_id());
        tracing::info!(conn = peer.conn_id(), "UI detached");
        for (window, owner) in windows {
            if let Some(extension) = host.extension(&owner) {
                extension.queue_event("window/closed", &json!({"windowId": window, "reason": "ui_detached"}));
            }
        }
    });
    Ok(Attached { attached: true })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowClosed {
    window_id: String,
}

/// From the UI: a person closed a window. Its extension hears `window/closed {reason: "user"}`.
pub async fn window_closed(ctx: Ctx<ControlSession>, params: WindowClosed) -> Result<(), RpcError> {
    let host = &ctx.state.host;
    let owner = host
        .dialogs
        .forget_window(&params.window_id)
        .ok_or_else(|| RpcError::new(errors::WINDOW_ERROR, "no such window"))?;
    if let Some(extension) = host.extension(&owner) {
        extension.queue_event("window/closed", &json!({"windowId": params.window_id, "reason": "user"}));
    }
    Ok(())
}
