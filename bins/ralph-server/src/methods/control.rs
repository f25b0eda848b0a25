//! `stop {force?}`, `checkpoint` and `inject_prompt {prompt}`: requests the
//! loop takes at its next step (a forced stop at once).

use std::sync::Arc;

use rpc_core::router::Answer;
use rpc_core::{ConnCtx, Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::events::Client;
use crate::errors;
use crate::state::Session;

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

/// Takes effect in its turn (`method_now`): a stop in a batch refused past
/// the write budget, or queued and refused at shutdown, never happened.
pub fn stop(
    session: Arc<Session>,
) -> impl Fn(&ConnCtx<Client>, StopParams) -> Answer<Requested> + Send + Sync + 'static {
    move |_, params: StopParams| {
        tracing::info!(force = params.force, "stop requested");
        session.request(|r| r.stop = Some(r.stop.unwrap_or(false) || params.force));
        Answer::Now(Ok(Requested { status: "stop_requested" }))
    }
}

/// In its turn, as [`stop`].
pub fn checkpoint(
    session: Arc<Session>,
) -> impl Fn(&ConnCtx<Client>, NoParams) -> Answer<Requested> + Send + Sync + 'static {
    move |_, _| {
        tracing::info!("checkpoint requested");
        session.request(|r| r.checkpoint = true);
        Answer::Now(Ok(Requested { status: "checkpoint_requested" }))
    }
}

#[derive(Debug, Deserialize)]
pub struct InjectParams {
    prompt: String,
}

/// Queues the prompt within the limits on pending prompts (-32602 past
/// them, naming the setting), once it is saved: a sync, off the runtime's threads.
pub fn inject_prompt(session: Arc<Session>) -> impl Fn(Ctx<Client>, InjectParams) -> Pending + Send + Sync + 'static {
    move |_, params: InjectParams| {
        let session = session.clone();
        Box::pin(async move {
            if params.prompt.trim().is_empty() {
                return Err(RpcError::invalid_params("prompt: must not be empty"));
            }
            // No agent could take it as an argument: an accepted prompt must always be deliverable.
            if params.prompt.contains('\0') {
                return Err(RpcError::invalid_params("prompt: must not contain a NUL character (U+0000)"));
            }
            let prompt = params.prompt;
            let (saved, prompt) = tokio::task::spawn_blocking(move || (session.inject(&prompt), prompt))
                .await
                .map_err(|e| RpcError::internal(format!("inject_prompt: {e}")))?;
            saved.map_err(errors::injection_refused)?;
            Ok(json!({"status": "prompt_injected", "prompt": prompt}))
        })
    }
}

type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, RpcError>> + Send>>;
