//! What a control connection can become: the UI (`ui/attach`: the host
//! sends it `ui/*` requests, it answers, and tells of windows a person
//! closed with `window/closed`), or a subscriber (`subscribe {events}` to
//! `extension_state`, `log`, `message_changed`, or `*`).

use rpc_core::fanout::{self, Topics};
use rpc_core::{Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::ControlConn;
use crate::errors;
use crate::host::TOPICS;

#[derive(Serialize)]
pub struct Attached {
    attached: bool,
}

pub async fn attach(ctx: Ctx<ControlConn>, _: NoParams) -> Result<Attached, RpcError> {
    let host = ctx.state.host.clone();
    host.ui.attach(ctx.peer.clone())?;
    tracing::info!(conn = ctx.peer.conn_id(), "UI attached");
    let peer = ctx.peer.clone();
    tokio::spawn(async move {
        peer.closed().await;
        let windows = host.ui.detach(peer.conn_id());
        tracing::info!(conn = peer.conn_id(), "UI detached");
        for (window, owner) in windows {
            if let Some(peer) = host.extension(&owner).and_then(|e| e.running_peer()) {
                let _ = peer.notify("window/closed", json!({"windowId": window, "reason": "ui_detached"})).await;
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
pub async fn window_closed(ctx: Ctx<ControlConn>, params: WindowClosed) -> Result<(), RpcError> {
    let host = &ctx.state.host;
    let owner = host
        .ui
        .forget_window(&params.window_id)
        .ok_or_else(|| RpcError::new(errors::WINDOW_ERROR, "no such window"))?;
    if let Some(peer) = host.extension(&owner).and_then(|e| e.running_peer()) {
        let _ = peer.notify("window/closed", json!({"windowId": params.window_id, "reason": "user"})).await;
    }
    Ok(())
}

#[derive(Deserialize)]
pub struct SubscribeParams {
    events: Vec<String>,
}

#[derive(Serialize)]
pub struct Subscribed {
    events: Vec<String>,
}

/// Replaces this connection's subscription. Events arrive as notifications
/// named after their topic; after a gap (the client did not read), a
/// `missed {count}` notification comes first.
pub async fn subscribe(ctx: Ctx<ControlConn>, params: SubscribeParams) -> Result<Subscribed, RpcError> {
    for event in &params.events {
        if event != fanout::EVERY_TOPIC && !TOPICS.contains(&event.as_str()) {
            return Err(RpcError::invalid_params(format!(
                "events: unknown event {event:?} (known: {})",
                TOPICS.join(", ")
            )));
        }
    }
    let topics = Topics::only(params.events.iter().cloned());
    let subscription = ctx.state.host.events.subscribe(topics);
    let pump = tokio::spawn(fanout::pump(subscription, ctx.peer.clone(), |count| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "missed", "params": {"count": count}}))
            .unwrap_or_default()
    }));
    if let Some(old) = ctx.state.pump.lock().replace(pump) {
        old.abort();
    }
    let events = if params.events.iter().any(|e| e == fanout::EVERY_TOPIC) {
        TOPICS.iter().map(|t| t.to_string()).collect()
    } else {
        params.events
    };
    Ok(Subscribed { events })
}
