//! `extensions/list`, `extensions/reload`, `extensions/logs`,
//! `command/execute`, `schema/get`.

use rpc_core::{Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::errors;
use crate::extension::Listing;
use crate::extension::lineup;
use crate::extension::log::{LogLine, RING_LINES};
use crate::state::ControlSession;

#[derive(Serialize)]
pub struct List {
    extensions: Vec<Listing>,
}

pub async fn list(ctx: Ctx<ControlSession>, _: NoParams) -> Result<List, RpcError> {
    Ok(List { extensions: ctx.state.host.extensions().iter().map(|e| e.listing()).collect() })
}

#[derive(Deserialize)]
pub struct ReloadParams {
    name: Option<String>,
}

#[derive(Serialize)]
pub struct Reloaded {
    extensions: Vec<String>,
}

pub async fn reload(ctx: Ctx<ControlSession>, params: ReloadParams) -> Result<Reloaded, RpcError> {
    let host = ctx.state.host.clone();
    // The reload goes on even if this client leaves: half a reload helps no one.
    let names = tokio::spawn(async move { lineup::reload(&host, params.name.as_deref()).await })
        .await
        .map_err(|e| RpcError::internal(e.to_string()))??;
    Ok(Reloaded { extensions: names })
}

#[derive(Deserialize)]
pub struct LogsParams {
    name: String,
    lines: Option<usize>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Logs {
    lines: Vec<LogLine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_file: Option<String>,
}

pub async fn logs(ctx: Ctx<ControlSession>, params: LogsParams) -> Result<Logs, RpcError> {
    let extension = ctx
        .state
        .host
        .extension(&params.name)
        .ok_or_else(|| RpcError::new(errors::GENERAL, format!("no extension named {:?}", params.name)))?;
    Ok(Logs {
        lines: extension.log.tail(params.lines.unwrap_or(100).min(RING_LINES)),
        log_file: extension.log.path().map(|p| p.display().to_string()),
    })
}

#[derive(Deserialize)]
pub struct ExecuteParams {
    command: String,
}

#[derive(Serialize)]
pub struct Sent {
    sent: bool,
    extension: String,
}

pub async fn execute(ctx: Ctx<ControlSession>, params: ExecuteParams) -> Result<Sent, RpcError> {
    let extension = ctx.state.host.execute(&params.command).await?;
    Ok(Sent { sent: true, extension })
}

pub async fn schema(ctx: Ctx<ControlSession>, _: NoParams) -> Result<Value, RpcError> {
    Ok(ctx.state.host.merged_schema())
}
