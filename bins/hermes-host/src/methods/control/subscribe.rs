//! `subscribe {events}`: a control client hears `extension_state`, `log`,
//! `message_changed` (or `*`, all of them) as notifications named after
//! their topic.

use rpc_core::fanout::{self, Topics};
use rpc_core::{Ctx, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::{ControlSession, TOPICS};

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
pub async fn subscribe(ctx: Ctx<ControlSession>, params: SubscribeParams) -> Result<Subscribed, RpcError> {
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
