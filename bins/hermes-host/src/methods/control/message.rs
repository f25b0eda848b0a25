//! `message/new`, `message/open`, `message/get`, `message/set`,
//! `message/patch`, `message/save`.

use std::path::PathBuf;

use rpc_core::{Ctx, RpcError};
use serde::{Deserialize, Serialize};

use crate::document::PatchOutcome;
use crate::hl7::tree::Format;
use crate::methods::extension::editor::{self, GetParams, Message, PatchParams};
use crate::state::ControlSession;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Opened {
    has_file: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_path: Option<String>,
}

/// `message/new {message?, format?}`: a bare header, or the given text as a
/// new message with no file (so a later save asks for a path and never
/// overwrites the file of the message open before).
#[derive(Deserialize)]
pub struct NewParams {
    message: Option<String>,
    #[serde(default = "editor::hl7")]
    format: Format,
}

pub async fn new(ctx: Ctx<ControlSession>, params: NewParams) -> Result<Opened, RpcError> {
    ctx.state.host.document.new_message(params.message.map(|text| (text, params.format))).await?;
    Ok(Opened { has_file: false, file_path: None })
}

#[derive(Deserialize)]
pub struct OpenParams {
    path: PathBuf,
}

pub async fn open(ctx: Ctx<ControlSession>, params: OpenParams) -> Result<Opened, RpcError> {
    let path = ctx.state.host.document.open(&params.path).await?;
    Ok(Opened { has_file: true, file_path: Some(path.display().to_string()) })
}

/// What `editor/getMessage` answers, and whether it has unsaved changes.
#[derive(Serialize)]
pub struct Snapshot {
    #[serde(flatten)]
    message: Message,
    dirty: bool,
}

/// The reply's room in the connection's outbox is taken before it is made
/// (the message's size, more for a tree): pipelined gets from a client that
/// does not read then wait for it one budget at a time, instead of 32 at
/// once each holding a copy of the message.
pub async fn get(ctx: Ctx<ControlSession>, params: GetParams) -> Result<Snapshot, RpcError> {
    let document = &ctx.state.host.document;
    let size = document.current().map_or(0, |(message, _)| message.len());
    let reply = match params.format {
        // Escaped as JSON: a segment's `\r` becomes two bytes.
        Format::Hl7 => size + size / 8,
        _ => size.saturating_mul(4),
    };
    let _room = ctx.peer.reserve_reply(reply + 1024).await.map_err(|_| RpcError::internal("the connection closed"))?;
    let dirty = document.is_dirty();
    let (message, file) = document.render(params.format).await?;
    Ok(Snapshot { message: Message { message, has_file: file.is_some(), file_path: file }, dirty })
}

#[derive(Deserialize)]
pub struct SetParams {
    message: String,
    #[serde(default = "editor::hl7")]
    format: Format,
}

#[derive(Serialize)]
pub struct Done {
    success: bool,
}

pub async fn set(ctx: Ctx<ControlSession>, params: SetParams) -> Result<Done, RpcError> {
    ctx.state.host.document.set(params.message, params.format, "control").await?;
    Ok(Done { success: true })
}

/// `message/patch {patches}`: what `editor/patchMessage` does for an
/// extension, for a control client; the change is reported as by `control`.
pub async fn patch(ctx: Ctx<ControlSession>, params: PatchParams) -> Result<PatchOutcome, RpcError> {
    ctx.state.host.document.patch(params.patches, "control").await
}

#[derive(Deserialize)]
pub struct SaveParams {
    path: Option<PathBuf>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    file_path: String,
}

pub async fn save(ctx: Ctx<ControlSession>, params: SaveParams) -> Result<Saved, RpcError> {
    let path = ctx.state.host.document.save(params.path.as_deref()).await?;
    Ok(Saved { file_path: path.display().to_string() })
}
