//! `stop {force?}`, `checkpoint` and `inject_prompt {prompt}`: requests the
//! loop takes at its next step (a forced stop at once).

use std::sync::Arc;

use rpc_core::{Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Client;
use crate::prompt::queue_injection;
use crate::session::Session;

/// Longest prompt one `inject_prompt` may add.
const MAX_INJECTED: usize = 256 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopParams {
    /// Extension: end the agent's process group now (SIGTERM, SIGKILL after 5 s).
    #[serde(default)]
    force: bool,
}

#[derive(Debug, Serialize)]
pub struct Requested {
    status: &'static str,
}

pub fn stop(
    session: Arc<Session>,
) -> impl Fn(Ctx<Client>, StopParams) -> std::future::Ready<Result<Requested, RpcError>> + Send + Sync + 'static {
    move |_, params: StopParams| {
        tracing::info!(force = params.force, "stop requested");
        session.request(|r| r.stop = Some(r.stop.unwrap_or(false) || params.force));
        std::future::ready(Ok(Requested { status: "stop_requested" }))
    }
}

pub fn checkpoint(
    session: Arc<Session>,
) -> impl Fn(Ctx<Client>, NoParams) -> std::future::Ready<Result<Requested, RpcError>> + Send + Sync + 'static {
    move |_, _| {
        tracing::info!("checkpoint requested");
        session.request(|r| r.checkpoint = true);
        std::future::ready(Ok(Requested { status: "checkpoint_requested" }))
    }
}

#[derive(Debug, Deserialize)]
pub struct InjectParams {
    prompt: String,
}

pub fn inject_prompt(
    session: Arc<Session>,
) -> impl Fn(Ctx<Client>, InjectParams) -> std::future::Ready<Result<Value, RpcError>> + Send + Sync + 'static {
    move |_, params: InjectParams| {
        let result = if params.prompt.trim().is_empty() {
            Err(RpcError::invalid_params("prompt: must not be empty"))
        } else if params.prompt.len() > MAX_INJECTED {
            Err(RpcError::invalid_params(format!("prompt: longer than {MAX_INJECTED} bytes")))
        } else {
            session.request(|r| queue_injection(&mut r.pending_prompt, &params.prompt));
            Ok(json!({"status": "prompt_injected", "prompt": params.prompt}))
        };
        std::future::ready(result)
    }
}
