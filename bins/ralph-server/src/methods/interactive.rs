//! `set_interactive_mode {enabled}` and `write_pty {data}`: a person typing
//! to the agent. Completion detection is off while interactive mode is on;
//! the mode ends with the iteration.

use std::sync::Arc;

use bytes::Bytes;
use rpc_core::{Ctx, RpcError};
use serde::Deserialize;
use serde_json::{Value, json};

use super::events::Client;
use crate::state::Session;

/// Most bytes one `write_pty` may carry (keystrokes, a paste).
const MAX_WRITE: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
pub struct ModeParams {
    enabled: bool,
}

pub fn set_interactive_mode(
    session: Arc<Session>,
) -> impl Fn(Ctx<Client>, ModeParams) -> std::future::Ready<Result<Value, RpcError>> + Send + Sync + 'static {
    move |_, params: ModeParams| {
        session.change(|f| f.interactive_mode = params.enabled);
        std::future::ready(Ok(json!({"interactive_mode": params.enabled})))
    }
}

#[derive(Debug, Deserialize)]
pub struct WriteParams {
    data: String,
}

pub fn write_pty(session: Arc<Session>) -> impl Fn(Ctx<Client>, WriteParams) -> Pending + Send + Sync + 'static {
    move |_, params: WriteParams| {
        let session = session.clone();
        Box::pin(async move {
            if params.data.len() > MAX_WRITE {
                return Err(RpcError::invalid_params(format!("data: longer than {MAX_WRITE} bytes")));
            }
            if !session.interactive() {
                return Ok(json!({"status": "ignored", "reason": "not in interactive mode"}));
            }
            let Some(terminal) = session.terminal() else {
                return Ok(json!({"status": "ignored", "reason": "no agent running"}));
            };
            // Waits for room: the terminal takes keys as fast as the agent reads them.
            match terminal.send(Bytes::from(params.data.into_bytes())).await {
                Ok(()) => Ok(json!({"status": "forwarded"})),
                Err(_) => Ok(json!({"status": "ignored", "reason": "no agent running"})),
            }
        })
    }
}

type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, RpcError>> + Send>>;
