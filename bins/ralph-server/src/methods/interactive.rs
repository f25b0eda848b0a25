//! `set_interactive_mode {enabled}` and `write_pty {data}`: a person typing
//! to the agent. Completion detection is off while interactive mode is on;
//! the mode ends with the iteration.

use std::sync::Arc;

use bytes::Bytes;
use rpc_core::router::Answer;
use rpc_core::{ConnCtx, Ctx, RpcError};
use serde::Deserialize;
use serde_json::{Value, json};

use super::events::Client;
use crate::state::Session;
use crate::terminal::KeysRefused;

/// Most bytes one `write_pty` may carry (keystrokes, a paste).
const MAX_WRITE: usize = 64 * 1024;
const NO_AGENT: &str = "no agent running";
/// Keys refused because those before them are still waiting (see `terminal`).
const TERMINAL_FULL: &str = "the agent is not reading its terminal";

#[derive(Debug, Deserialize)]
pub struct ModeParams {
    enabled: bool,
}

/// In its turn (`method_now`), as `stop`.
pub fn set_interactive_mode(
    session: Arc<Session>,
) -> impl Fn(&ConnCtx<Client>, ModeParams) -> Answer<Value> + Send + Sync + 'static {
    move |_, params: ModeParams| {
        session.change(|f| f.interactive_mode = params.enabled);
        Answer::Now(Ok(json!({"interactive_mode": params.enabled})))
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
                return Ok(json!({"status": "ignored", "reason": NO_AGENT}));
            };
            // Never waits for the terminal: an agent that does not read would hold the reply for good.
            match terminal.send(Bytes::from(params.data.into_bytes())) {
                Ok(()) => Ok(json!({"status": "forwarded"})),
                Err(KeysRefused::Full) => Ok(json!({"status": "ignored", "reason": TERMINAL_FULL})),
                Err(KeysRefused::Gone) => Ok(json!({"status": "ignored", "reason": NO_AGENT})),
            }
        })
    }
}

type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, RpcError>> + Send>>;
